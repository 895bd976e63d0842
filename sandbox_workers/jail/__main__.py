"""``python -m sandbox_workers.jail build|probe``: compile the launcher; list the layers."""

from __future__ import annotations

import argparse
import sys

from sandbox_workers.jail.build import build
from sandbox_workers.jail.config import JailConfig
from sandbox_workers.jail.detect import detect_layers


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m sandbox_workers.jail")
    parser.add_argument("command", choices=("build", "probe"))
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    config = JailConfig(strict=False)
    if args.command == "build":
        binaries = build(config.bin_dir, force=args.force)
        print(binaries.launcher)
        print(binaries.library)
        return 0
    layers = detect_layers(config)
    for layer in layers:
        state = "ok" if layer.active else "MISSING"
        print(f"{state:8} {layer.name:14} {layer.detail}")
    return 0 if all(layer.active for layer in layers if layer.required) else 1


if __name__ == "__main__":
    sys.exit(main())
