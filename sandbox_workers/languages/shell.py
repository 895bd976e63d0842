"""Bash scripts."""

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

__all__ = ["Bash"]

# Bash 5.2's builtins (`enable -a`), and the hook for a command that is not found.
_BUILTINS = (
    ". : [ alias bg bind break builtin caller cd command compgen complete compopt continue"
    " declare dirs disown echo enable eval exec exit export false fc fg getopts hash help"
    " history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly"
    " return set shift shopt source suspend test times trap true type typeset ulimit umask"
    " unalias unset wait"
)

# Put between the program and an assert suite's tests (one script, the program first):
# undoes what the program's top-level code did to the shell that runs the tests. (The
# function under test runs in the tests' command substitutions, subshells: what it does
# there never reaches this shell.) A function named like a builtin (`set() { :; }` made the
# tests' `set -e` a no-op, so a failed check no longer ended the run) is removed by
# `unset -f`, which in POSIX mode is found before any function of that name (assigning
# POSIXLY_CORRECT is no command, so nothing can stand in for it); builtins switched off
# by `enable -n` are switched on, aliases and the shell options that change the checks
# (extdebug: a failing DEBUG trap skips the next command; nocasematch) go, and so do the
# program's traps. Each line's command name is quoted, so no alias replaces it. A function
# that cannot be removed (readonly) ends the run: `${...?}` is an expansion, no command.
# A failed check exits 1 (set -e): the EXIT trap says so in words, as an assert would.
_TEST_PRELUDE = f"""
POSIXLY_CORRECT=y
\\unset -f {_BUILTINS} command_not_found_handle || {{
    rewardbus_key=()
    : "${{rewardbus_readonly_function?readonly function: the assertions cannot be trusted}}"
}}
\\enable {_BUILTINS}
\\unalias -a
\\shopt -u expand_aliases extdebug nocasematch
\\trap - DEBUG RETURN ERR EXIT
\\unset POSIXLY_CORRECT
\\trap '[[ $? != 1 ]] || echo "assertion failed: $BASH_COMMAND" >&2' EXIT
"""
# MultiPL-E's tests turn errexit on (`set -e`) and then rely on it.
_ERREXIT = re.compile(r"^\s*set\s+-e\s*$", re.MULTILINE)


class Bash(Language):
    """GNU bash running the script file (never ``bash -c`` with a string)."""

    name = "bash"
    aliases = frozenset({"bash", "sh", "shell"})
    fence_tags = frozenset({"bash", "sh", "shell", "zsh"})
    extension = "sh"
    test_prelude = _TEST_PRELUDE

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

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # An assert suite passes when bash exits 0, so `exit 0`, `exec`, `set -n` or a trap
        # that exits 0 passed every test: the marker is printed after the tests' last line.
        # Its key is the first line after the program: a here-document that swallows the
        # tests (up to their last line, so that what follows still runs) swallows the key.
        # Tests that turned errexit on get the marker only if it is still on: a `set` that
        # did not take effect (a readonly function of that name) let failed checks pass.
        # Without the key, `${...?}` ends the script with a message; no command is involved.
        masked, key = masked_marker(marker)
        erased = "rewardbus_key=()"
        check = (
            f"[[ -o errexit ]] || {{ {erased}; "
            ': "${rewardbus_assertions_off?assertions were switched off: set -e did not hold}"; }\n'
            if _ERREXIT.search(tests)
            else ""
        )
        return (
            f"rewardbus_key=({byte_list(key).replace(',', ' ')})\n{tests}\n{check}"
            f"rewardbus_masked=({byte_list(masked).replace(',', ' ')})\n"
            "rewardbus_text=\n"
            'for rewardbus_i in "${!rewardbus_masked[@]}"; do\n'
            "  printf -v rewardbus_byte '\\\\x%02x'"
            ' "$(( rewardbus_masked[rewardbus_i] ^ rewardbus_key[rewardbus_i] ))"\n'
            "  rewardbus_text+=$rewardbus_byte\n"
            "done\n"
            'printf "$rewardbus_text" >&2\n'
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        # No profile or rc file: the host's shell configuration must not leak in.
        return Launch(argv=(toolchain.paths["bash"], "--noprofile", "--norc", entry))


def _bash_version(banner: str) -> str:
    # "GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)"
    match = re.search(r"version (\S+)", banner)
    return f"bash-{match.group(1)}" if match else banner
