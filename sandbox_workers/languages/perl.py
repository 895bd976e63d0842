"""Perl 5 scripts."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
    read_only,
)
from schemas import Limits

__all__ = ["Perl"]

# Put between the program and an assert suite's tests (one file, the program first): undoes
# what the program's compile-time code did to the code compiled after it.
# - `package main`: the tests run where MultiPL-E's tests expect the program's subs.
# - The program's lexical pragmas end: `use integer`, `use utf8`, and overload::constant
#   (bigint's, or one that turns every literal of the tests into a value equal to anything).
# - `no overloading`: the tests' == and eq compare values; a returned object whose
#   overloaded == is always true compares by address (so does an honest Math::BigInt: the
#   price of this line).
# - Overrides of core functions (`*CORE::GLOBAL::exit = sub {}` made the tests' `exit 1`
#   a no-op) are deleted before the tests compile, so their calls are the core ops.
# - MultiPL-E's Perl tests fail by `exit 1`: the END block says so in words, as an assert
#   would (ours runs before the program's END blocks: last defined, first run).
_TEST_PRELUDE = r"""
package main;
BEGIN { $^H = 0; %^H = (); }
no overloading;
BEGIN { delete @CORE::GLOBAL::{keys %CORE::GLOBAL::}; }
$rewardbus::testing = 1;
END {
    print STDERR "\nassertion failed: the tests exited with status 1\n"
        if $? == 1 && $rewardbus::testing;
}
"""


class Perl(Language):
    """The system perl running the script file; ``PERL5OPT``/``PERL5LIB`` never reach it."""

    name = "perl"
    aliases = frozenset({"perl", "perl5", "pl"})
    fence_tags = frozenset({"perl", "pl"})
    extension = "pl"
    test_prelude = _TEST_PRELUDE

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

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # An assert suite passes when perl exits 0, so `exit 0` (in add, in a BEGIN block, an
        # END block resetting $?, POSIX::_exit, exec) passed every test: the marker comes
        # after the tests' last line. Its key is the first line after the program: a
        # here-document or __END__ that swallows the tests (up to their last line, so that
        # what follows still runs) swallows the key too.
        masked, key = masked_marker(marker)
        return (
            f"my @rewardbus_key = ({byte_list(key)});\n{tests}\n"
            f"my @rewardbus_masked = ({byte_list(masked)});\n"
            "print STDERR pack('C*', map { $rewardbus_masked[$_] ^ $rewardbus_key[$_] }"
            " 0 .. $#rewardbus_masked);\n"
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(argv=(toolchain.paths["perl"], entry))


def _perl_version(banner: str) -> str:
    match = re.search(r"v?(\d+\.\d+\.\d+)", banner)
    return f"perl-{match.group(1)}" if match else banner
