"""Bash scripts."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    discover_binary,
    read_only,
)
from schemas import Limits

__all__ = ["Bash"]


class Bash(Language):
    """GNU bash running the script file (never ``bash -c`` with a string)."""

    name = "bash"
    aliases = frozenset({"bash", "sh", "shell"})
    fence_tags = frozenset({"bash", "sh", "shell", "zsh"})
    extension = "sh"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        # Scripts call coreutils, so the directory holding them is mounted too.
        return discover_binary(
            self.name,
            "bash",
            ["--version"],
            version=_bash_version,
            mounts=lambda bash: read_only(bash.parent),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        # No profile or rc file: the host's shell configuration must not leak in.
        return Launch(argv=(toolchain.paths["bash"], "--noprofile", "--norc", entry))


def _bash_version(banner: str) -> str:
    # "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)"
    match = re.search(r"version (\S+)", banner)
    return f"bash-{match.group(1)}" if match else banner
