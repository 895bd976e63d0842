"""``python -m sandbox_workers.languages``: discover every toolchain once and list them.

Discovery builds what a toolchain caches on the host (the JVM languages' class-data
archives, ``jvm.py``), so the worker image runs it at build time: its workers then start
without that work.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sandbox_workers.languages import LANGUAGES, discover_toolchains


def main() -> int:
    """Entry point; returns 0 (an image may carry only some languages)."""
    with tempfile.TemporaryDirectory(prefix="rewardbus-discovery-") as state:
        found = discover_toolchains(Path(state))
    for name in sorted(LANGUAGES):
        toolchain = found.get(name)
        version = toolchain.version if toolchain else ""
        print(f"{'ok' if toolchain else 'absent':8} {name:14} {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
