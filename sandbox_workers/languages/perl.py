"""Perl 5 scripts."""

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

__all__ = ["Perl"]


class Perl(Language):
    """The system perl running the script file; ``PERL5OPT``/``PERL5LIB`` never reach it."""

    name = "perl"
    aliases = frozenset({"perl", "perl5", "pl"})
    fence_tags = frozenset({"perl", "pl"})
    extension = "pl"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        # The interpreter's modules live under /usr/share/perl* and /usr/lib/*/perl*,
        # which the jail's read-only /usr already shows.
        return discover_binary(
            self.name,
            "perl",
            ["-e", "print $^V"],
            version=_perl_version,
            mounts=lambda perl: read_only(perl.parent),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(argv=(toolchain.paths["perl"], entry))


def _perl_version(banner: str) -> str:
    match = re.search(r"v?(\d+\.\d+\.\d+)", banner)
    return f"perl-{match.group(1)}" if match else banner
