"""Perl 5 scripts."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    probe_version,
    read_only,
    resolve_binary,
)
from schemas import Limits

__all__ = ["Perl"]


class Perl(Language):
    """The system perl running the script file; ``PERL5OPT``/``PERL5LIB`` never reach it."""

    name = "perl"
    aliases = frozenset({"perl", "perl5", "pl"})
    fence_tags = frozenset({"perl", "pl"})
    extension = "pl"

    def discover(self, state_dir: Path) -> Toolchain | None:
        del state_dir
        perl = resolve_binary("perl")
        if perl is None:
            return None
        banner = probe_version([str(perl), "-e", "print $^V"])
        if banner is None:
            return None
        match = re.search(r"v?(\d+\.\d+\.\d+)", banner)
        version = f"perl-{match.group(1)}" if match else banner
        # The interpreter's modules live under /usr/share/perl* and /usr/lib/*/perl*,
        # which the jail's read-only /usr already shows.
        return Toolchain(
            language=self.name,
            version=version,
            paths={"perl": str(perl)},
            mounts=read_only(perl.parent),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(argv=(toolchain.paths["perl"], entry))
