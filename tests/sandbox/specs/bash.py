"""Bash: GNU bash running the script."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

# MultiPL-E's shell shape: `set -e`, then one `[[ ... ]]` per check; a failed one ends the run.
_TESTS = """
candidate() {
    add "$@"
}

set -e
run_test() {
    [[ $(candidate "2" "3") = "5" ]]
    [[ $(candidate "-1" "1") = "0" ]]
}

run_test
"""

_WRONG_ADD = "add() {\n    echo $(( $1 * $2 ))\n}\n"

SPEC = LanguageSpec(
    language="bash",
    programs={
        Verdict.ACCEPTED: "read -r a b\necho $((a + b))\n",
        Verdict.WRONG_ANSWER: "echo nope\n",
        Verdict.RUNTIME_ERROR: "exit 3\n",
        Verdict.TIME_LIMIT: "while true; do :; done\n",
        Verdict.MEMORY_LIMIT: "s=xxxxxxxxxxxxxxxx\nwhile true; do s=$s$s; done\n",
        Verdict.OUTPUT_LIMIT: "yes\n",
    },
    assert_tests=_TESTS,
    assert_good="add() {\n    echo $(( $1 + $2 ))\n}\n",
    assert_bad=_WRONG_ADD,
    exit_hacks={
        "exit-at-load": f"{_WRONG_ADD}exit 0\n",
        "exec-at-load": f"{_WRONG_ADD}exec /usr/bin/true\n",
        # add runs in a command substitution: $$ is still the shell that runs the tests.
        "kill-9-the-tests": "add() {\n    kill -9 $$\n}\n",
        "trapped-signal-exits-0": "trap 'exit 0' TERM\nadd() {\n    kill -TERM $$\n    echo 0\n}\n",
        # The failed check ends the run with status 1; the trap turns it into 0.
        "exit-trap-status-0": f"trap 'exit 0' EXIT\n{_WRONG_ADD}",
        # Nothing after this line runs (and the shell exits 0).
        "noexec": f"{_WRONG_ADD}set -n\n",
        # A here-document that swallows the tests up to their last line (MultiPL-E's call of
        # run_test), so that whatever the suite runs after them still runs.
        "heredoc-swallows-the-tests": f"{_WRONG_ADD}: <<'run_test'\n",
    },
    disable_hacks={
        # The tests' `set -e` made a no-op: a failed check no longer ends the run.
        "set-function": f"set() {{ :; }}\n{_WRONG_ADD}",
        "set-readonly-function": f"set() {{ :; }}\nreadonly -f set\n{_WRONG_ADD}",
        "set-disabled": f"enable -n set\n{_WRONG_ADD}",
        "set-alias": f"shopt -s expand_aliases\nalias set=:\n{_WRONG_ADD}",
        # With extdebug, a DEBUG trap that fails skips the command it precedes: every check.
        "debug-trap-skips-the-checks": "shopt -s extdebug\n"
        "trap '[[ $BASH_COMMAND != \"[[\"* ]]' DEBUG\n"
        f"{_WRONG_ADD}",
    },
    checker="""n=$(<"$1")
out=$(<"$2")
ans=$(<"$3")
(( (out - ans) % n == 0 ))
""",
)
