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
    utf8,
)
from schemas import Limits

__all__ = ["Perl"]

# Put between the program and an assert suite's tests. The program runs as a string eval
# compiled after the tests (see Perl.prepare_source), so its compile-time tricks (a
# source filter, overrides of exit, overload::constant, `package`) cannot reach them.
# - `no overloading`: the tests' == and eq compare values; a returned object whose
#   overloaded == is always true compares by address (so does an honest Math::BigInt: the
#   price of this line).
# - MultiPL-E's Perl tests fail by `exit 1`: the END block says so in words, as an assert
#   would. (The program's END blocks, compiled later, run before it: one that resets $?
#   to 0 still loses the marker.)
_TEST_PRELUDE = r"""
no overloading;
$rewardbus::testing = 1;
END {
    print STDERR "\nassertion failed: the tests exited with status 1\n"
        if $? == 1 && $rewardbus::testing;
}
"""
# mark_tests_end's first line: where the program ends in an assert suite's source.
_KEY_LINE = "my @rewardbus_key = ("


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

    def prepare_source(self, source: str) -> str:
        # An assert suite's source is the program, then mark_tests_end's text (the last
        # key line is ours: the program comes first). The program becomes a string eval
        # that the tests' file runs first: perl compiles it on its own, after the tests,
        # so what it does at compile time (a source filter that rewrites the rest of the
        # file, a here-document or __END__ that swallows it, lexical pragmas) cannot
        # reach them; string evals take no source filters. Hex, so that no text of the
        # program can end the string. #line keeps its messages' file and line numbers.
        cut = source.rfind(f"\n{_KEY_LINE}")
        if cut < 0:
            return source
        program, tests = source[:cut], source[cut + 1 :]
        key, _, rest = tests.partition("\n")
        named = f'#line 1 "{self.source_name(program)}"\n{program}\n'
        return f"{key}\neval pack('H*', '{utf8(named).hex()}');\ndie $@ if $@;\n{rest}"

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # An assert suite passes when perl exits 0, so `exit 0` (in add, in a BEGIN block, an
        # END block resetting $?, POSIX::_exit, exec) passed every test: the marker comes
        # after the tests' last line. Its key is the first line after the program, where
        # prepare_source finds the program's end (and, were the program not split off, a
        # here-document that swallowed the tests up to their last line would swallow it).
        masked, key = masked_marker(marker)
        return (
            f"{_KEY_LINE}{byte_list(key)});\n{tests}\n"
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
