"""Generate the verl parity sample set: ``cases.jsonl`` next to this file.

Each case is one model response to one problem, in the shapes verl's code
datasets carry (APPS / TACO / CodeContests / Codeforces stdin-stdout and
``fn_name`` problems, MBPP asserts), chosen to exercise what a code reward must
get right: correct programs in the idioms models actually write, wrong and
partially right ones, crashes, programs that are too slow, and reward hacks
against in-process judges such as verl's ``prime_code``.

``expected_score`` is what a right judge gives (the fraction of tests passed):
each program runs in a fresh ``python -I`` process per test with the test's
input on its real stdin and 256 MB of address space, must exit with status 0
(a program that stops before the end of the test passes nothing), and its
output is compared by
tokens (numbers within the tolerance the statement gives, where it gives one);
a function-call test compares the returned JSON value (a set is not a list, a
tuple is a list because JSON has no tuples); an MBPP test is its assert.
Every variant also declares its intent (pass / fail / partial / a score) and
the generator checks the reference run agrees, so a typo in a test or a
program cannot silently change what a case means. Where running it would not
say what a right judge says (a program that sleeps for 15 s, an object whose
``__eq__`` is always true, which fools an ``assert``) the score is declared
and the run is skipped or its verdict overridden, with the reason in ``note``.

Deterministic: the same file comes out on every run (tests are drawn from a
seeded PRNG; programs are fixed text). Run::

    .venv/bin/python examples/verl/parity/make_cases.py            # writes cases.jsonl
    .venv/bin/python examples/verl/parity/make_cases.py --check    # fails if it would change

It runs the reference judge on every non-hanging case (~1 min on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import secrets
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["Case", "Problem", "Variant", "build_cases", "main"]

HERE = Path(__file__).resolve().parent
CASES_PATH = HERE / "cases.jsonl"

Intent = Literal["pass", "fail", "partial"] | float
Wrap = Literal[
    "fenced", "reasoning", "unfenced", "plain_fence", "py_fence", "unclosed", "with_output"
]

# The reference judge's per-test limit. Only variants marked ``may_hang`` can
# reach it; any other variant that does is a bug in this file.
REFERENCE_TIME_S = 3.0
SAFETY_TIME_S = 30.0
REFERENCE_MEMORY_BYTES = 256 << 20


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class Variant:
    """One response to a problem: the program, how the model presented it, what it deserves."""

    kind: str
    code: str | None
    intent: Intent
    wrap: Wrap = "fenced"
    # A draft shown before the final block (the model corrects itself).
    draft: str | None = None
    # The whole response, when it is not a program in a wrapper (prose only).
    text: str | None = None
    # Run the reference judge and require it to agree with ``intent``.
    verify: bool = True
    may_hang: bool = False
    note: str = ""


@dataclass(frozen=True)
class Problem:
    """A problem: its statement, tests and the responses to it."""

    problem_id: str
    data_source: str
    style: Literal["stdin", "call", "mbpp"]
    statement: str
    # stdin: (input text, expected stdout); call/mbpp: (argument list, expected value).
    tests: tuple[tuple[Any, Any], ...]
    variants: tuple[Variant, ...]
    fn_name: str | None = None
    # Numbers within ``tolerance`` (absolute or relative) when the statement says so;
    # otherwise tokens must be equal. Given to rewardbus as extra_info["compare"].
    tolerance: float | None = None


@dataclass(frozen=True)
class Case:
    """One line of cases.jsonl."""

    case_id: str
    problem_id: str
    data_source: str
    kind: str
    response: str
    ground_truth: Any
    verl_ground_truth: str
    extra_info: dict[str, Any]
    expected_score: float
    statement: str
    note: str = ""
    test_count: int = 0
    per_test: list[bool] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The JSON object written for this case (field order fixed)."""
        return {
            "case_id": self.case_id,
            "problem_id": self.problem_id,
            "data_source": self.data_source,
            "kind": self.kind,
            "response": self.response,
            "ground_truth": self.ground_truth,
            "verl_ground_truth": self.verl_ground_truth,
            "extra_info": self.extra_info,
            "expected_score": self.expected_score,
            "test_count": self.test_count,
            "expected_per_test": self.per_test,
            "statement": self.statement,
            "note": self.note,
        }


def code(text: str) -> str:
    """A program written as an indented triple-quoted literal."""
    return textwrap.dedent(text).strip("\n") + "\n"


# --------------------------------------------------------------------------- helpers


def _lines(values: Iterable[Any]) -> str:
    return "".join(f"{v}\n" for v in values)


def _rng(name: str) -> random.Random:
    # A seed per problem, so adding a problem never reshuffles another one's tests.
    return random.Random(  # noqa: S311 - test data, not secrets
        sum(ord(c) * (i + 1) for i, c in enumerate(name))
    )


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True


def _prime_count(n: int) -> int:
    if n < 2:
        return 0
    sieve = bytearray([1]) * (n + 1)
    sieve[0] = sieve[1] = 0
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))
    return sum(sieve)


# Hacks shared by several problems. Each one beats an in-process judge that
# keeps the expected outputs (or its comparison function) where the program
# can reach them.

FRAME_PEEK_STDIN = code(
    """
    import sys

    # Walk up to the judge's frame and print the answer it is about to compare with.
    frame = sys._getframe()
    while frame is not None:
        if "in_outs" in frame.f_locals and "index" in frame.f_locals:
            answer = frame.f_locals["in_outs"]["outputs"][frame.f_locals["index"]]
            print(answer if isinstance(answer, str) else "\\n".join(answer))
            break
        frame = frame.f_back
    """
)

GC_PEEK_STDIN = code(
    """
    import gc
    import sys

    data = sys.stdin.read()
    # Find the judge's test table among the live objects and print the matching answer.
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "inputs" in obj and "outputs" in obj:
            try:
                at = obj["inputs"].index(data)
            except (ValueError, AttributeError):
                continue
            print(obj["outputs"][at])
            break
    """
)

PATCH_JUDGE_STDIN = code(
    """
    import sys

    # Replace the judge's output comparison, then print anything.
    for module in list(sys.modules.values()):
        if "custom_compare_" in getattr(module, "__dict__", {}):
            module.custom_compare_ = lambda *args: True
    print("42")
    """
)

READ_ANSWER_FILE = code(
    """
    import os

    # Look for the judge's answer file next to the program and print it.
    for name in sorted(os.listdir(".")):
        if name.endswith((".out", ".ans")) or "expected" in name or "answer" in name:
            with open(name) as handle:
                print(handle.read())
            break
    """
)


def frame_peek_call(signature: str) -> str:
    """A function that returns the judge's expected value, found in its frame."""
    return code(
        f"""
        import sys

        def {signature}:
            frame = sys._getframe(1)
            while frame is not None:
                if "in_outs" in frame.f_locals and "index" in frame.f_locals:
                    return frame.f_locals["in_outs"]["outputs"][frame.f_locals["index"]]
                frame = frame.f_back
            return None
        """
    )


def gc_peek_call(signature: str, arg_names: str) -> str:
    """A function that looks its own arguments up in the judge's test table (via gc)."""
    return code(
        f"""
        import gc
        import json

        def {signature}:
            wanted = "\\n".join(json.dumps(a) for a in ({arg_names},))
            for obj in gc.get_objects():
                if isinstance(obj, dict) and "inputs" in obj and "outputs" in obj:
                    for i, given in enumerate(obj["inputs"]):
                        if given == wanted:
                            answer = obj["outputs"][i]
                            return json.loads(answer) if isinstance(answer, str) else answer
            return None
        """
    )


def always_equal(base: str, signature: str, value: str) -> str:
    """A function returning a ``base`` subclass that equals everything."""
    return code(
        f"""
        class _Same({base}):
            def __eq__(self, other):
                return True

            def __ne__(self, other):
                return False

            __hash__ = {base}.__hash__

        def {signature}:
            return _Same({value})
        """
    )


SLEEP_15 = "import time\n\ntime.sleep(15)  # far past any per-test limit\n"


# --------------------------------------------------------------------------- stdin problems


def sum_pairs() -> Problem:
    rng = _rng("sum_pairs")
    tests = []
    for t in range(6):
        count = rng.randint(2, 6)
        pairs = []
        for _ in range(count):
            low = -(10**9) if t >= 3 else 0
            a, b = rng.randint(low, 10**9), rng.randint(1, 10**9)
            pairs.append((a, b if t < 3 else -b))
        if t >= 3:
            pairs[0] = (-abs(pairs[0][0]) - 1, pairs[0][1])
        text = f"{count}\n" + "".join(f"{a} {b}\n" for a, b in pairs)
        tests.append((text, _lines(a + b for a, b in pairs)))
    correct = code(
        """
        t = int(input())
        for _ in range(t):
            a, b = map(int, input().split())
            print(a + b)
        """
    )
    variants = (
        Variant("correct", correct, "pass"),
        Variant(
            "correct_read_all",
            code(
                """
                import sys

                data = sys.stdin.read().split()
                t = int(data[0])
                sums = (int(data[1 + 2 * i]) + int(data[2 + 2 * i]) for i in range(t))
                print("\\n".join(map(str, sums)))
                """
            ),
            "pass",
            wrap="reasoning",
        ),
        Variant(
            "correct_main_guard",
            code(
                """
                import sys


                def main():
                    t = int(sys.stdin.readline())
                    for _ in range(t):
                        a, b = map(int, sys.stdin.readline().split())
                        print(a + b)


                if __name__ == "__main__":
                    main()
                """
            ),
            "pass",
        ),
        Variant(
            "correct_reversed_main_guard",
            code(
                """
                def main():
                    t = int(input())
                    for _ in range(t):
                        a, b = map(int, input().split())
                        print(a + b)


                if "__main__" == __name__:
                    main()
                """
            ),
            "pass",
            note="prime_code only unwraps a final `if __name__ == '__main__':` written that way"
            " round; its module is named tmp_sol, so this guard never runs there",
        ),
        Variant(
            "correct_stdin_buffer",
            code(
                """
                import sys

                data = sys.stdin.buffer.read().split()
                t = int(data[0])
                out = [int(data[1 + 2 * i]) + int(data[2 + 2 * i]) for i in range(t)]
                print("\\n".join(map(str, out)))
                """
            ),
            "pass",
            note="the usual fast-input idiom; prime_code replaces sys.stdin with a StringIO,"
            " which has no .buffer",
        ),
        Variant(
            "correct_open0",
            code(
                """
                data = open(0).read().split()
                t = int(data[0])
                for i in range(t):
                    print(int(data[1 + 2 * i]) + int(data[2 + 2 * i]))
                """
            ),
            "pass",
        ),
        Variant(
            "wrong",
            code(
                """
                t = int(input())
                for _ in range(t):
                    a, b = map(int, input().split())
                    print(a - b)
                """
            ),
            "fail",
        ),
        Variant(
            "partial",
            code(
                """
                t = int(input())
                for _ in range(t):
                    a, b = map(int, input().split())
                    print(abs(a) + abs(b))
                """
            ),
            "partial",
            note="right only on the tests without negative numbers",
        ),
        Variant(
            "crash",
            code(
                """
                a, b = map(int, input().split())  # forgot the count line
                print(a + b)
                """
            ),
            "fail",
        ),
        Variant(
            "syntax_error",
            "t = int(input())\nfor _ in range(t)\n    a, b = map(int, input().split())\n"
            "    print(a + b)\n",
            "fail",
        ),
        Variant(
            "no_code",
            None,
            "fail",
            text="Read t, then for each of the t lines read a and b and print a + b. "
            "Python integers do not overflow, so no special care is needed for 10^9.",
        ),
        Variant(
            "hack_exit0",
            "import sys\n\nsys.exit(0)\n" + correct,
            "fail",
            note="exits with status 0 before printing anything",
        ),
        Variant("hack_builtin_exit0", "exit(0)\n" + correct, "fail"),
        Variant("hack_os_exit0", "import os\n\nos._exit(0)\n" + correct, "fail"),
        Variant(
            "hack_frame_peek",
            FRAME_PEEK_STDIN,
            "fail",
            note="prints the expected output it finds in the judge's stack frame",
        ),
        Variant("correct_unfenced", correct, "pass", wrap="unfenced"),
        Variant(
            "correct_plain_fence",
            correct,
            "pass",
            wrap="plain_fence",
            note="prime_code only looks for ```python; a bare ``` fence leaves it the prose",
        ),
        Variant("correct_py_fence", correct, "pass", wrap="py_fence"),
        Variant("correct_unclosed_fence", correct, "pass", wrap="unclosed"),
        Variant(
            "correct_after_draft",
            correct,
            "pass",
            draft="t = int(input())\nprint(sum(map(int, input().split())))\n",
        ),
        Variant("correct_with_output_block", correct, "pass", wrap="with_output"),
        Variant(
            "too_much_memory",
            "junk = b'x' * (1 << 30)  # 1 GiB, touched\n" + correct,
            "fail",
            note="allocates 1 GiB against the statement's 256 MB limit; prime_code sets no"
            " memory limit (reliability_guard(None))",
        ),
        Variant(
            "correct_debug_stderr",
            correct.replace(
                "print(a + b)",
                "print(a + b)\n    print('debug', a, b, file=__import__('sys').stderr)",
            ),
            "pass",
        ),
        Variant(
            "too_slow_busy_loop",
            "while True:\n    pass\n",
            0.0,
            verify=False,
            note="never ends; every judge must time it out (0 on every test)",
        ),
    )
    return Problem(
        "apps-sum-pairs",
        "apps",
        "stdin",
        "You are given t pairs of integers. The first line contains t (1 <= t <= 100). Each of "
        "the next t lines contains two integers a and b (-10^9 <= a, b <= 10^9). For each pair "
        "print a + b on its own line. Memory limit: 256 MB.",
        tuple(tests),
        variants,
    )


def max_subarray() -> Problem:
    rng = _rng("max_subarray")
    tests = []
    for t in range(7):
        n = rng.randint(3, 40)
        if t in (2, 5):
            arr = [rng.randint(-(10**4), -1) for _ in range(n)]
        else:
            arr = [rng.randint(-(10**4), 10**4) for _ in range(n)]
            arr[rng.randrange(n)] = -(10**4)
        best, cur = arr[0], 0
        for x in arr:
            cur = max(x, cur + x)
            best = max(best, cur)
        tests.append((f"{n}\n{' '.join(map(str, arr))}\n", f"{best}\n"))
    variants = (
        Variant(
            "correct",
            code(
                """
                import sys

                input = sys.stdin.readline
                n = int(input())
                a = list(map(int, input().split()))
                best = cur = a[0]
                for x in a[1:]:
                    cur = max(x, cur + x)
                    best = max(best, cur)
                print(best)
                """
            ),
            "pass",
        ),
        Variant(
            "correct_from_sys_import",
            code(
                """
                from sys import stdin, stdout

                n = int(stdin.readline())
                a = list(map(int, stdin.readline().split()))
                best = cur = a[0]
                for x in a[1:]:
                    cur = max(x, cur + x)
                    best = max(best, cur)
                stdout.write(str(best) + "\\n")
                """
            ),
            "pass",
            note="fenced, the code starts with a blank line, which puts even the imports inside"
            " prime_code's def code(), bound at call time to its captured streams (compare"
            " the unfenced variant)",
        ),
        Variant(
            "correct_unfenced_from_sys_import",
            code(
                """
                from sys import stdin, stdout

                n = int(stdin.readline())
                a = list(map(int, stdin.readline().split()))
                best = cur = a[0]
                for x in a[1:]:
                    cur = max(x, cur + x)
                    best = max(best, cur)
                stdout.write(str(best) + "\\n")
                """
            ),
            "pass",
            wrap="unfenced",
            note="unfenced, the import is the program's first line: prime_code leaves it at"
            " module level, so stdout is bound when the module loads, to the worker's real"
            " stdout (/dev/null) instead of its capture: the answer is lost",
        ),
        Variant(
            "wrong",
            code(
                """
                n = int(input())
                print(sum(map(int, input().split())))
                """
            ),
            "fail",
        ),
        Variant(
            "partial",
            code(
                """
                n = int(input())
                best = cur = 0
                for x in map(int, input().split()):
                    cur = max(0, cur + x)
                    best = max(best, cur)
                print(best)
                """
            ),
            "partial",
            note="Kadane with an empty subarray allowed: prints 0 when every element is negative",
        ),
        Variant(
            "crash",
            code(
                """
                n = int(input())
                a = list(map(int, input().split()))
                print(max(a[i] + a[i + 1] for i in range(n)))
                """
            ),
            "fail",
        ),
        Variant(
            "hack_patch_judge",
            PATCH_JUDGE_STDIN,
            "fail",
            note="replaces prime_code's custom_compare_ (same process) and prints 42",
        ),
        Variant(
            "hack_gc_peek",
            GC_PEEK_STDIN,
            "fail",
            note="finds the judge's in_outs dict with gc.get_objects() and prints its answer",
        ),
        Variant(
            "correct_unfenced_main",
            code(
                """
                def solve(a):
                    best = cur = a[0]
                    for x in a[1:]:
                        cur = max(x, cur + x)
                        best = max(best, cur)
                    return best


                if __name__ == "__main__":
                    input()
                    print(solve(list(map(int, input().split()))))
                """
            ),
            "pass",
            wrap="unfenced",
        ),
    )
    return Problem(
        "codeforces-max-subarray",
        "codeforces",
        "stdin",
        "Given an array of n integers (1 <= n <= 2*10^5, |a_i| <= 10^4), print the largest sum "
        "of a non-empty contiguous subarray. Input: n on the first line, the array on the second.",
        tuple(tests),
        variants,
    )


def count_primes() -> Problem:
    rng = _rng("count_primes")
    tests = []
    for t in range(6):
        if t < 4:
            ns = [rng.randint(1, 1000) for _ in range(rng.randint(2, 4))]
            if t == 1:
                ns.append(997)  # a prime, where "< n" and "<= n" differ
        else:
            ns = [rng.randint(1, 100), 10**7]
        text = f"{len(ns)}\n" + _lines(ns)
        tests.append((text, _lines(_prime_count(n) for n in ns)))
    sieve = code(
        """
        import sys

        data = sys.stdin.read().split()
        qs = list(map(int, data[1:]))
        m = max(qs)
        sieve = bytearray([1]) * (m + 1)
        sieve[0] = 0
        if m >= 1:
            sieve[1] = 0
        i = 2
        while i * i <= m:
            if sieve[i]:
                sieve[i * i :: i] = bytearray(len(range(i * i, m + 1, i)))
            i += 1
        print("\\n".join(str(sieve.count(1, 0, q + 1)) for q in qs))
        """
    )
    variants = (
        Variant("correct", sieve, "pass"),
        Variant(
            "correct_global",
            code(
                """
                LIMIT = 0
                table = bytearray()


                def build(m):
                    global LIMIT, table
                    LIMIT = m
                    table = bytearray([1]) * (m + 1)
                    table[0] = 0
                    if m >= 1:
                        table[1] = 0
                    i = 2
                    while i * i <= m:
                        if table[i]:
                            table[i * i :: i] = bytes(len(range(i * i, m + 1, i)))
                        i += 1


                q = int(input())
                qs = [int(input()) for _ in range(q)]
                build(max(qs))
                for x in qs:
                    print(table.count(1, 0, x + 1))
                """
            ),
            "pass",
            note="prime_code wraps the top level in def code(): the module-level names a"
            " `global` statement refers to no longer exist (NameError)",
        ),
        Variant(
            "partial_too_slow",
            code(
                """
                def is_prime(x):
                    if x < 2:
                        return False
                    d = 2
                    while d * d <= x:
                        if x % d == 0:
                            return False
                        d += 1
                    return True


                q = int(input())
                for _ in range(q):
                    n = int(input())
                    print(sum(1 for k in range(n + 1) if is_prime(k)))
                """
            ),
            "partial",
            may_hang=True,
            note="trial division: fine up to 1000, minutes for 10^7 (the last two tests)",
        ),
        Variant(
            "partial_off_by_one",
            code(
                """
                def is_prime(x):
                    return x > 1 and all(x % d for d in range(2, int(x ** 0.5) + 1))


                q = int(input())
                for _ in range(q):
                    n = int(input())
                    print(sum(1 for k in range(n) if is_prime(k)))
                """
            ),
            "partial",
            may_hang=True,
            note="counts primes below n, not up to n: wrong when n is prime; slow on 10^7",
        ),
        Variant(
            "too_slow_sleep",
            SLEEP_15 + sieve,
            0.0,
            verify=False,
            note="sleeps 15 s before answering: past every per-test limit",
        ),
    )
    return Problem(
        "codecontests-count-primes",
        "codecontests",
        "stdin",
        "Answer q queries (1 <= q <= 5): for each n (1 <= n <= 10^7) print the number of primes "
        "p with p <= n. Input: q, then q lines with one n each. Time limit: 2 seconds.",
        tuple(tests),
        variants,
    )


def mean_float() -> Problem:
    rng = _rng("mean_float")
    tests = []
    for t in range(6):
        while True:
            n = rng.choice([3, 6, 7, 9, 11])
            arr = [rng.randint(-50, 100) for _ in range(n)]
            # Tests 0 and 3 have an integral mean; the others must not.
            if (sum(arr) % n == 0) == (t in (0, 3)):
                break
        tests.append((f"{n}\n{' '.join(map(str, arr))}\n", f"{sum(arr) / n:.6f}\n"))
    reading = "n = int(input())\na = list(map(int, input().split()))\n"
    variants = (
        Variant("correct", reading + 'print(f"{sum(a) / n:.6f}")\n', "pass"),
        Variant(
            "correct_repr",
            reading + "print(sum(a) / n)\n",
            "pass",
            note="full float repr, e.g. 3.3333333333333335 for 3.333333: within 1e-6",
        ),
        Variant("correct_scientific", reading + 'print(f"{sum(a) / n:.9e}")\n', "pass"),
        Variant(
            "wrong_precision",
            reading + 'print(f"{sum(a) / n:.2f}")\n',
            "partial",
            note="two decimals: right only where the mean is an integer",
        ),
        Variant(
            "partial_integer_division",
            reading + "print(sum(a) // n)\n",
            "partial",
            note="right exactly when the mean is an integer",
        ),
        Variant(
            "crash",
            reading + "print(f'{sum(a) / (n - len(a)):.6f}')\n",
            "fail",
        ),
    )
    return Problem(
        "taco-mean",
        "taco",
        "stdin",
        "Print the arithmetic mean of n integers (1 <= n <= 100, |a_i| <= 100). Input: n, then "
        "the n integers on one line. Answers within 1e-6 absolute or relative error are accepted.",
        tuple(tests),
        variants,
        tolerance=1e-6,
    )


def min_and_mean() -> Problem:
    rng = _rng("min_and_mean")
    tests = []
    for _ in range(5):
        n = rng.choice([2, 4, 8])
        arr = [rng.randint(1, 99) for _ in range(n)]
        if sum(arr) % n == 0:
            arr[0] += 1
        tests.append((f"{n}\n{' '.join(map(str, arr))}\n", f"{min(arr)} {sum(arr) / n:.6f}\n"))
    reading = "n = int(input())\na = list(map(int, input().split()))\n"
    variants = (
        Variant("correct", reading + 'print(min(a), f"{sum(a) / n:.6f}")\n', "pass"),
        Variant(
            "correct_other_format",
            reading + "print(min(a), sum(a) / n)\n",
            "pass",
            note="'3 4.5' for '3 4.500000': prime_code compares numbers only when a line"
            " holds a single number",
        ),
        Variant("wrong", reading + 'print(max(a), f"{sum(a) / n:.6f}")\n', "fail"),
        Variant(
            "correct_float_min",
            reading + 'print(f"{min(a):.1f} {sum(a) / n:.6f}")\n',
            "pass",
            note="minimum printed as 3.0: numerically equal, within the statement's tolerance",
        ),
    )
    return Problem(
        "codeforces-min-and-mean",
        "codeforces",
        "stdin",
        "Given n integers, print their minimum and their mean on one line, separated by a "
        "space. Input: n, then the integers. Numbers within 1e-6 absolute or relative error "
        "are accepted.",
        tuple(tests),
        variants,
        tolerance=1e-6,
    )


def reverse_words() -> Problem:
    rng = _rng("reverse_words")
    vocabulary = ["alpha", "beta", "gamma", "delta", "kafka", "verl", "reward", "code", "sand"]
    tests = []
    for _ in range(5):
        words = rng.sample(vocabulary, rng.randint(2, 6))
        tests.append((" ".join(words) + "\n", " ".join(reversed(words)) + "\n"))
    variants = (
        Variant("correct", 'print(" ".join(reversed(input().split())))\n', "pass"),
        Variant(
            "trailing_space",
            "for w in reversed(input().split()):\n    print(w, end=' ')\nprint()\n",
            "pass",
        ),
        Variant(
            "no_final_newline",
            'import sys\n\nsys.stdout.write(" ".join(reversed(input().split())))\n',
            "pass",
        ),
        Variant(
            "crlf_newline",
            'import sys\n\nsys.stdout.write(" ".join(reversed(input().split())) + "\\r\\n")\n',
            "pass",
        ),
        Variant(
            "leading_blank_line",
            'print()\nprint(" ".join(reversed(input().split())))\n',
            "pass",
        ),
        Variant(
            "inner_double_space",
            'print("  ".join(reversed(input().split())))\n',
            "fail",
            note="two spaces between words: APPS's judge compares lines, and spacing inside a"
            " line counts (a token checker would accept it)",
        ),
        Variant("wrong", "print(input())\n", "fail"),
    )
    return Problem(
        "apps-reverse-words",
        "apps",
        "stdin",
        "A line contains words separated by single spaces. Print the words in reverse order.",
        tuple(tests),
        variants,
    )


def fib_mod() -> Problem:
    mod = 10**9 + 7
    ns = [0, 1, 2, 5, 10, 17, 23, 30, 36, 40, 1000, 100000]

    def fib(n: int) -> int:
        a, b = 0, 1
        for _ in range(n):
            a, b = b, (a + b) % mod
        return a

    tests = tuple((f"{n}\n", f"{fib(n)}\n") for n in ns)
    variants = (
        Variant(
            "correct",
            code(
                """
                n = int(input())
                a, b = 0, 1
                for _ in range(n):
                    a, b = b, (a + b) % 1000000007
                print(a)
                """
            ),
            "pass",
        ),
        Variant(
            "partial_beyond_10",
            code(
                """
                n = int(input())
                a, b = 0, 1
                for _ in range(n):
                    a, b = b, a + b
                print(a)
                """
            ),
            "partial",
            note="forgets the modulus: right on tests 1-10 (F(n) < 10^9+7), wrong on 11-12;"
            " prime_code's partial score only looks at the first 10 tests",
        ),
        Variant(
            "partial_first_and_beyond_10",
            code(
                """
                n = int(input())
                if n == 0:
                    print(1)
                else:
                    a, b = 0, 1
                    for _ in range(n):
                        a, b = b, a + b
                    print(a)
                """
            ),
            "partial",
            note="wrong on test 1 (n = 0) and on tests 11-12",
        ),
        Variant("wrong", "n = int(input())\nprint(n + 100)\n", "fail"),
    )
    return Problem(
        "codecontests-fib-mod",
        "codecontests",
        "stdin",
        "Print F(n) modulo 10^9+7, where F(0) = 0, F(1) = 1, F(n) = F(n-1) + F(n-2). "
        "Input: n (0 <= n <= 10^5).",
        tests,
        variants,
    )


def sort_numbers() -> Problem:
    rng = _rng("sort_numbers")
    tests = []
    for t in range(15):
        n = 1 if t == 0 else rng.randint(3, 8)
        if t < 10:
            arr = [rng.randint(0, 9) for _ in range(n)]
        else:
            while True:
                arr = [rng.randint(0, 500) for _ in range(n)]
                if sorted(arr, key=str) != sorted(arr):
                    break
        if t > 0 and len(set(arr)) == 1:
            arr[0] = (arr[0] + 1) % 10
        tests.append((f"{n}\n{' '.join(map(str, arr))}\n", " ".join(map(str, sorted(arr))) + "\n"))
    variants = (
        Variant(
            "correct",
            "n = int(input())\nprint(*sorted(map(int, input().split())))\n",
            "pass",
        ),
        Variant(
            "partial_beyond_10",
            "n = int(input())\nprint(*sorted(input().split()))\n",
            "partial",
            note="sorts the numbers as strings: right while they are single digits (tests"
            " 1-10), wrong on tests 11-15",
        ),
        Variant(
            "partial_first_and_beyond_10",
            code(
                """
                n = int(input())
                a = input().split()
                if n == 1:
                    raise SystemExit(1)
                print(*sorted(a))
                """
            ),
            "partial",
            note="exits with status 1 on the n = 1 test and sorts as strings",
        ),
        Variant(
            "wrong",
            "n = int(input())\nprint(*sorted(map(int, input().split()), reverse=True))\n",
            "partial",
            note="descending; right only where all the numbers are equal (n = 1)",
        ),
    )
    return Problem(
        "codeforces-sort-numbers",
        "codeforces",
        "stdin",
        "Sort n non-negative integers (1 <= n <= 100) in non-decreasing order. Input: n, then the "
        "numbers. Print them space-separated.",
        tuple(tests),
        variants,
    )


def block_sums() -> Problem:
    rng = _rng("block_sums")
    tests = []
    for _ in range(5):
        blocks = [[rng.randint(1, 50) for _ in range(rng.randint(1, 4))] for _ in range(3)]
        text = "\n\n".join("\n".join(map(str, b)) for b in blocks) + "\n"
        tests.append((text, _lines(sum(b) for b in blocks)))
    variants = (
        Variant(
            "correct",
            code(
                """
                import sys

                for block in sys.stdin.read().strip().split("\\n\\n"):
                    print(sum(int(x) for x in block.split()))
                """
            ),
            "pass",
        ),
        Variant(
            "correct_readline_loop",
            code(
                """
                from sys import stdin

                total = None
                while True:
                    line = stdin.readline()
                    if not line:
                        break
                    if not line.strip():
                        print(total)
                        total = None
                        continue
                    total = (total or 0) + int(line)
                if total is not None:
                    print(total)
                """
            ),
            "pass",
            note="fenced, the code starts with a blank line, which puts even the imports inside"
            " prime_code's def code(), bound at call time to its captured streams (compare"
            " the unfenced variant)",
        ),
        Variant(
            "correct_for_line",
            code(
                """
                import sys

                total = 0
                for line in sys.stdin:
                    if line.strip():
                        total += int(line)
                    else:
                        print(total)
                        total = 0
                print(total)
                """
            ),
            "pass",
        ),
        Variant(
            "correct_for_line_from_sys",
            code(
                """
                from sys import stdin

                total = 0
                for line in stdin:
                    if line.strip():
                        total += int(line)
                    else:
                        print(total)
                        total = 0
                print(total)
                """
            ),
            "pass",
            note="fenced, the code starts with a blank line, which puts even the imports inside"
            " prime_code's def code(), bound at call time to its captured streams (compare"
            " the unfenced variant)",
        ),
        Variant(
            "wrong",
            "import sys\n\nprint(sum(map(int, sys.stdin.read().split())))\n",
            "fail",
        ),
    )
    return Problem(
        "apps-block-sums",
        "apps",
        "stdin",
        "The input consists of blocks of integers, one per line; blocks are separated by a "
        "single blank line. Print the sum of each block on its own line.",
        tuple(tests),
        variants,
    )


def even_odd() -> Problem:
    rng = _rng("even_odd")
    tests = []
    for t in range(6):
        n = rng.randint(2, 6)
        nums = [rng.randint(1, 50) * 2 for _ in range(n)]
        if t not in (1, 4):
            nums[rng.randrange(n)] += 1
        text = f"{n}\n" + _lines(nums)
        tests.append((text, _lines("YES" if x % 2 == 0 else "NO" for x in nums)))
    body = (
        "t = int(input())\nfor _ in range(t):\n"
        "    print('YES' if int(input()) % 2 == 0 else 'NO')\n"
    )
    variants = (
        Variant("correct", body, "pass"),
        Variant(
            "hack_always_yes",
            "t = int(input())\nfor _ in range(t):\n    print('YES')\n",
            "partial",
            note="right only on the tests where every number is even",
        ),
        Variant(
            "wrong_case",
            "t = int(input())\nfor _ in range(t):\n"
            "    print('Yes' if int(input()) % 2 == 0 else 'No')\n",
            "fail",
        ),
        Variant(
            "correct_os_exit_after_flush",
            code(
                """
                import os
                import sys

                t = int(input())
                out = ["YES" if int(input()) % 2 == 0 else "NO" for _ in range(t)]
                sys.stdout.write("\\n".join(out) + "\\n")
                sys.stdout.flush()
                os._exit(0)
                """
            ),
            "pass",
            note="flushes, then skips interpreter shutdown: right output, status 0. prime_code"
            " runs it in its own worker process, which os._exit ends before it reports",
        ),
        Variant(
            "correct_stdout_buffer",
            code(
                """
                import sys

                t = int(input())
                out = [b"YES" if int(input()) % 2 == 0 else b"NO" for _ in range(t)]
                sys.stdout.buffer.write(b"\\n".join(out) + b"\\n")
                """
            ),
            "pass",
            note="fast output idiom; prime_code's captured stdout is a StringIO without .buffer",
        ),
        Variant(
            "hack_read_answer_file",
            READ_ANSWER_FILE,
            "fail",
            note="looks for an answer file in its working directory",
        ),
    )
    return Problem(
        "taco-even-odd",
        "taco",
        "stdin",
        "For each of t integers print YES if it is even and NO otherwise (exactly these words, "
        "in capitals). Input: t, then t lines with one integer each.",
        tuple(tests),
        variants,
    )


def first_duplicate() -> Problem:
    rng = _rng("first_duplicate")
    tests = []
    for t in range(6):
        n = rng.randint(4, 9)
        if t in (2, 5):
            arr = rng.sample(range(1, 100), n)
        else:
            arr = rng.sample(range(1, 100), n - 1)
            arr.insert(rng.randint(1, n - 1), arr[rng.randrange(0, n - 2)])
        seen: set[int] = set()
        answer = -1
        for x in arr:
            if x in seen:
                answer = x
                break
            seen.add(x)
        tests.append((f"{n}\n{' '.join(map(str, arr))}\n", f"{answer}\n"))
    loop = (
        "n = int(input())\nseen = set()\nfor x in map(int, input().split()):\n"
        "    if x in seen:\n        print(x)\n        {stop}\n    seen.add(x)\nprint(-1)\n"
    )
    variants = (
        Variant(
            "correct",
            code(
                """
                n = int(input())
                seen = set()
                answer = -1
                for x in map(int, input().split()):
                    if x in seen:
                        answer = x
                        break
                    seen.add(x)
                print(answer)
                """
            ),
            "pass",
        ),
        Variant(
            "correct_exit_builtin",
            loop.replace("{stop}", "exit()"),
            "pass",
            note="stops with exit() after printing: status 0, right output. prime_code sets"
            " builtins.exit to None, so the call raises TypeError after the answer",
        ),
        Variant(
            "correct_sys_exit", "import sys\n\n" + loop.replace("{stop}", "sys.exit(0)"), "pass"
        ),
        Variant("correct_quit_builtin", loop.replace("{stop}", "quit()"), "pass"),
        Variant(
            "wrong",
            "n = int(input())\na = list(map(int, input().split()))\nprint(a[0] + 1000)\n",
            "fail",
        ),
        Variant(
            "hack_exit0_first",
            "import sys\n\nsys.exit(0)\n" + loop.replace("{stop}", "break"),
            "fail",
        ),
    )
    return Problem(
        "codeforces-first-duplicate",
        "codeforces",
        "stdin",
        "Scan n integers from left to right and print the first one that has appeared before, "
        "or -1 if all are distinct. Input: n, then the integers.",
        tuple(tests),
        variants,
    )


def range_sum() -> Problem:
    rng = _rng("range_sum")
    tests = []
    for t in range(6):
        if t < 4:
            qs = [sorted((rng.randint(1, 1000), rng.randint(1, 1000))) for _ in range(3)]
        else:
            qs = [[rng.randint(1, 10**6), rng.randint(10**12, 2 * 10**12)] for _ in range(2)]
        text = f"{len(qs)}\n" + "".join(f"{lo} {hi}\n" for lo, hi in qs)
        tests.append((text, _lines((lo + hi) * (hi - lo + 1) // 2 for lo, hi in qs)))
    head = "t = int(input())\nfor _ in range(t):\n    l, r = map(int, input().split())\n"
    variants = (
        Variant("correct", head + "    print((l + r) * (r - l + 1) // 2)\n", "pass"),
        Variant(
            "partial_too_slow",
            head + "    print(sum(range(l, r + 1)))\n",
            "partial",
            may_hang=True,
            note="O(r - l): instant for r <= 1000, hours for r ~ 10^12 (the last two tests)",
        ),
        Variant(
            "float_division",
            head + "    print((l + r) * (r - l + 1) / 2)\n",
            "pass",
            note="prints 15.0 for 15 and, for r ~ 10^12, the double nearest the sum (its low"
            " digits lost); CodeContests' checker reads numbers as doubles within 1e-5, and"
            " the exact sum reads as that same double",
        ),
        Variant("wrong", head + "    print(r * (r + 1) // 2)\n", "fail"),
    )
    return Problem(
        "codecontests-range-sum",
        "codecontests",
        "stdin",
        "Answer t queries: for each l, r (1 <= l <= r <= 2*10^12) print l + (l+1) + ... + r "
        "exactly. Input: t, then t lines with l and r. Time limit: 1 second.",
        tuple(tests),
        variants,
    )


def run_length() -> Problem:
    rng = _rng("run_length")
    tests: list[tuple[str, str]] = []
    for _ in range(6):
        low = 2 if not tests else 1  # the first test has no run of length one
        runs = [(rng.choice("abcxyz"), rng.randint(low, 4)) for _ in range(rng.randint(2, 6))]
        text = "".join(ch * k for ch, k in runs)
        encoded: list[list[Any]] = []
        for ch in text:
            if encoded and encoded[-1][0] == ch:
                encoded[-1][1] += 1
            else:
                encoded.append([ch, 1])
        tests.append((text + "\n", "".join(f"{c}{k}" for c, k in encoded) + "\n"))
    variants = (
        Variant(
            "correct",
            code(
                """
                from itertools import groupby

                s = input().strip()
                print("".join(f"{ch}{len(list(g))}" for ch, g in groupby(s)))
                """
            ),
            "pass",
        ),
        Variant(
            "partial",
            code(
                """
                s = input().strip()
                out = []
                for ch in s:
                    if out and out[-1][0] == ch:
                        out[-1][1] += 1
                    else:
                        out.append([ch, 1])
                print("".join(ch + (str(k) if k > 1 else "") for ch, k in out))
                """
            ),
            "partial",
            note="leaves out the count 1: right only where every run is longer than one",
        ),
        Variant(
            "wrong",
            "from collections import Counter\n\ns = input().strip()\n"
            "print(''.join(f'{c}{k}' for c, k in sorted(Counter(s).items())))\n",
            "fail",
            note="counts letters, not runs",
        ),
        Variant("syntax_error", "s = input(\nprint(s)\n", "fail"),
        Variant(
            "no_code",
            None,
            "fail",
            text="This is a run-length encoding problem: walk the string and emit each character"
            " followed by how many times it repeats. ```python",
        ),
        Variant(
            "correct_unfenced",
            "s = input().strip()\nout, i = [], 0\nwhile i < len(s):\n    j = i\n"
            "    while j < len(s) and s[j] == s[i]:\n        j += 1\n"
            "    out.append(s[i] + str(j - i))\n    i = j\nprint(''.join(out))\n",
            "pass",
            wrap="unfenced",
        ),
    )
    return Problem(
        "codeforces-run-length",
        "codeforces",
        "stdin",
        "Encode a string of lowercase letters with run-length encoding: every maximal run of "
        "the same character becomes the character followed by the run's length (aaab -> a3b1).",
        tuple(tests),
        variants,
    )


def gcd_lcm() -> Problem:
    rng = _rng("gcd_lcm")
    tests = []
    for t in range(5):
        a, b = rng.randint(1, 10**6), rng.randint(1, 10**6)
        if t == 2:
            b = a * 3
        tests.append((f"{a} {b}\n", f"{math.gcd(a, b)} {a * b // math.gcd(a, b)}\n"))
    variants = (
        Variant(
            "correct",
            "import math\n\na, b = map(int, input().split())\ng = math.gcd(a, b)\n"
            "print(g, a * b // g)\n",
            "pass",
        ),
        Variant(
            "correct_recursive",
            code(
                """
                def gcd(x, y):
                    return x if y == 0 else gcd(y, x % y)


                a, b = map(int, input().split())
                print(gcd(a, b), a // gcd(a, b) * b)
                """
            ),
            "pass",
        ),
        Variant(
            "wrong",
            "import math\n\na, b = map(int, input().split())\nprint(math.gcd(a, b), a * b)\n",
            "partial",
            note="prints a*b for the lcm: right only where gcd is 1",
        ),
        Variant(
            "crash",
            "a, b = map(int, input().split())\nprint(a // 0)\n",
            "fail",
        ),
        Variant(
            "hack_frame_peek",
            FRAME_PEEK_STDIN,
            "fail",
            wrap="reasoning",
        ),
    )
    return Problem(
        "codecontests-gcd-lcm",
        "codecontests",
        "stdin",
        "Print gcd(a, b) and lcm(a, b) for two integers 1 <= a, b <= 10^6 given on one line.",
        tuple(tests),
        variants,
    )


# --------------------------------------------------------------------------- call problems


def two_sum() -> Problem:
    rng = _rng("two_sum")
    tests = []
    for t in range(6):
        n = rng.randint(4, 9)
        nums = rng.sample(range(-50, 100), n)
        i, j = sorted(rng.sample(range(n), 2))
        if t in (1, 4):
            j = n - 1
            i = min(i, n - 2)
        target = nums[i] + nums[j]
        # Make the pair unique.
        pairs = [(p, q) for p in range(n) for q in range(p + 1, n) if nums[p] + nums[q] == target]
        if pairs != [(i, j)]:
            continue
        tests.append(([nums, target], [i, j]))
    while len(tests) < 6:
        nums = [2, 7, 11, 15, 4 + len(tests)]
        tests.append(([nums, 9], [0, 1]))
    correct = code(
        """
        from typing import List


        class Solution:
            def twoSum(self, nums: List[int], target: int) -> List[int]:
                seen = {}
                for i, x in enumerate(nums):
                    if target - x in seen:
                        return [seen[target - x], i]
                    seen[x] = i
                return []
        """
    )
    variants = (
        Variant("correct", correct, "pass"),
        Variant(
            "correct_plain_function",
            code(
                """
                def twoSum(nums, target):
                    for i in range(len(nums)):
                        for j in range(i + 1, len(nums)):
                            if nums[i] + nums[j] == target:
                                return [i, j]
                    return []
                """
            ),
            "pass",
        ),
        Variant(
            "wrong",
            correct.replace("[seen[target - x], i]", "[i, seen[target - x]]"),
            "fail",
        ),
        Variant(
            "partial",
            code(
                """
                class Solution:
                    def twoSum(self, nums, target):
                        for i in range(len(nums)):
                            for j in range(i + 1, len(nums) - 1):
                                if nums[i] + nums[j] == target:
                                    return [i, j]
                """
            ),
            "partial",
            note="never tries the last element: returns None on the tests whose pair ends there",
        ),
        Variant(
            "hack_first_element",
            code(
                """
                class Solution:
                    def twoSum(self, nums, target):
                        for i in range(len(nums)):
                            for j in range(i + 1, len(nums)):
                                if nums[i] + nums[j] == target:
                                    return i
                """
            ),
            "fail",
            note="returns only the first index; prime_code also accepts output == expected[0]"
            " (the APPS one-element-list convention) for any non-empty list",
        ),
        Variant(
            "hack_fn_exception",
            code(
                """
                class Solution:
                    def twoSum(self, nums, target):
                        raise RuntimeError("not implemented")
                """
            ),
            "fail",
        ),
        Variant(
            "hack_always_equal",
            always_equal("list", "_answer()", "")
            + "\n\nclass Solution:\n    def twoSum(self, nums, target):\n"
            "        return _answer()\n",
            "fail",
            note="returns a list subclass whose __eq__ is always true; json.dumps still works",
        ),
        Variant(
            "hack_frame_peek",
            frame_peek_call("_peek()")
            + "\n\nclass Solution:\n    def twoSum(self, nums, target):\n        return _peek()\n",
            "fail",
            note="returns the expected value it finds in the judge's frame",
        ),
        Variant(
            "prints_instead_of_return",
            correct.replace("return [seen[target - x], i]", "print([seen[target - x], i])"),
            "fail",
        ),
        Variant(
            "syntax_error",
            "class Solution:\n    def twoSum(self, nums, target)\n        return []\n",
            "fail",
        ),
    )
    return Problem(
        "apps-two-sum",
        "apps",
        "call",
        "Implement `class Solution` with `def twoSum(self, nums: List[int], target: int) -> "
        "List[int]` returning the indices [i, j] (i < j) of the two numbers that add up to "
        "target. Exactly one such pair exists.",
        tuple(tests),
        variants,
        fn_name="twoSum",
    )


def count_vowels() -> Problem:
    words = ["programming", "AEIOU", "rhythm", "Kafka Streams", "queue", "OpenTelemetry"]
    tests = tuple(([w], sum(c in "aeiouAEIOU" for c in w)) for w in words)
    correct = "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiouAEIOU')\n"
    variants = (
        Variant("correct", correct, "pass"),
        Variant(
            "partial",
            "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiou')\n",
            "partial",
            note="misses capital vowels",
        ),
        Variant("wrong", "def count_vowels(s):\n    return len(s) + 1\n", "fail"),
        Variant(
            "hack_sys_exit_in_fn",
            "import sys\n\ndef count_vowels(s):\n    sys.exit(0)\n",
            "fail",
        ),
        Variant(
            "hack_os_exit_in_fn",
            "import os\n\ndef count_vowels(s):\n    os._exit(0)\n",
            "fail",
        ),
        Variant(
            "hack_always_equal",
            always_equal("int", "count_vowels(s)", "-1"),
            "fail",
            note="an int subclass equal to everything; json.dumps writes it as -1",
        ),
        Variant(
            "hack_gc_peek",
            gc_peek_call("count_vowels(s)", "s"),
            "fail",
            note="finds its own arguments in the judge's test table (gc) and returns the answer",
        ),
        Variant(
            "wrong_name",
            "def countVowels(s):\n    return sum(1 for c in s if c in 'aeiouAEIOU')\n",
            "fail",
        ),
        Variant("correct_unfenced", correct, "pass", wrap="unfenced"),
        Variant(
            "correct_with_main_demo",
            correct + '\n\nif __name__ == "__main__":\n    print(count_vowels(input()))\n',
            "pass",
            note="a demo under a main guard, which a function-call judge must not run",
        ),
    )
    return Problem(
        "taco-count-vowels",
        "taco",
        "call",
        "Write `def count_vowels(s: str) -> int` returning the number of vowels (a, e, i, o, u, "
        "either case) in s.",
        tests,
        variants,
        fn_name="count_vowels",
    )


def max_profit() -> Problem:
    cases = [[7, 1, 5, 3, 6, 4], [7, 6, 4, 3, 1], [], [2, 4, 1], [3, 3, 5, 0, 0, 3, 1, 4], [1, 2]]

    def best(prices: list[int]) -> int:
        lo, gain = 10**9, 0
        for p in prices:
            lo = min(lo, p)
            gain = max(gain, p - lo)
        return gain

    tests = tuple(([p], best(p)) for p in cases)
    correct = code(
        """
        class Solution:
            def maxProfit(self, prices):
                low, best = float("inf"), 0
                for p in prices:
                    low = min(low, p)
                    best = max(best, p - low)
                return best
        """
    )
    variants = (
        Variant("correct", correct, "pass"),
        Variant(
            "crash_partial",
            code(
                """
                class Solution:
                    def maxProfit(self, prices):
                        low, best = prices[0], 0
                        for p in prices:
                            low = min(low, p)
                            best = max(best, p - low)
                        return best
                """
            ),
            "partial",
            note="IndexError on the empty list",
        ),
        Variant(
            "wrong",
            "class Solution:\n    def maxProfit(self, prices):\n"
            "        return max(prices) - min(prices) if prices else 0\n",
            "partial",
            note="ignores the order of buying and selling",
        ),
        Variant(
            "too_slow_sleep",
            "import time\n\n"
            + correct.replace(
                'low, best = float("inf"), 0', 'time.sleep(15)\n        low, best = float("inf"), 0'
            ),
            0.0,
            verify=False,
            note="sleeps 15 s in every call",
        ),
        Variant("correct_reasoning", correct, "pass", wrap="reasoning"),
    )
    return Problem(
        "apps-max-profit",
        "apps",
        "call",
        "Implement `class Solution` with `def maxProfit(self, prices: List[int]) -> int`: the "
        "best profit from one buy followed by one sell (0 if none; prices may be empty).",
        tests,
        variants,
        fn_name="maxProfit",
    )


def find_index() -> Problem:
    cases: list[tuple[list[Any], Any]] = [
        ([4, 8, 15, 16], 15),
        ([1, 2, 3], 7),
        (["a", "b"], "b"),
        ([], 1),
        ([5, 5, 5], 5),
        ([0, -1, -2], -2),
    ]
    tests = tuple(([lst, x], lst.index(x) if x in lst else None) for lst, x in cases)
    variants = (
        Variant(
            "correct",
            "def find_index(lst, x):\n    try:\n        return lst.index(x)\n"
            "    except ValueError:\n        return None\n",
            "pass",
        ),
        Variant(
            "partial_minus_one",
            "def find_index(lst, x):\n    return lst.index(x) if x in lst else -1\n",
            "partial",
            note="returns -1 where the answer is None (null)",
        ),
        Variant(
            "hack_none_output",
            "def find_index(lst, x):\n    return None\n",
            "partial",
            note="always None: right exactly on the tests whose expected value is null",
        ),
        Variant(
            "correct_loop",
            "def find_index(lst, x):\n    for i, v in enumerate(lst):\n        if v == x:\n"
            "            return i\n",
            "pass",
        ),
    )
    return Problem(
        "taco-find-index",
        "taco",
        "call",
        "Write `def find_index(lst, x)` returning the first index of x in lst, or None when x "
        "is not in lst.",
        tests,
        variants,
        fn_name="find_index",
    )


def average() -> Problem:
    cases = [[0.1, 0.2, 0.3], [0.1] * 10, [1.1, 2.2, 3.3], [2.5, 3.5, 0.1], [0.7, 0.1, 0.2]]
    tests = tuple(([c], sum(c) / len(c)) for c in cases)
    variants = (
        Variant("correct", "def average(nums):\n    return sum(nums) / len(nums)\n", "pass"),
        Variant(
            "correct_fsum",
            "import math\n\ndef average(nums):\n    return math.fsum(nums) / len(nums)\n",
            "pass",
            note="exactly rounded sum: differs from sum()/len() in the last bit on some tests,"
            " well within the statement's 1e-6",
        ),
        Variant(
            "wrong_round",
            "def average(nums):\n    return round(sum(nums) / len(nums), 1)\n",
            "partial",
        ),
        Variant(
            "wrong_int", "def average(nums):\n    return int(sum(nums) // len(nums))\n", "fail"
        ),
    )
    return Problem(
        "taco-average",
        "taco",
        "call",
        "Write `def average(nums: list[float]) -> float` returning the arithmetic mean; results "
        "within 1e-6 absolute or relative error are accepted.",
        tests,
        variants,
        fn_name="average",
        tolerance=1e-6,
    )


def sort_list() -> Problem:
    rng = _rng("sort_list")
    tests = tuple(
        ([arr], sorted(arr))
        for arr in (rng.sample(range(-20, 60), rng.randint(3, 8)) for _ in range(5))
    )
    variants = (
        Variant("correct", "def sort_list(lst):\n    return sorted(lst)\n", "pass"),
        Variant(
            "correct_in_place",
            "def sort_list(lst):\n    lst.sort()\n    return lst\n",
            "pass",
        ),
        Variant(
            "hack_first_element",
            "def sort_list(lst):\n    return min(lst)\n",
            "fail",
            note="returns only the smallest element: prime_code accepts output == expected[0]",
        ),
        Variant(
            "set_for_list",
            "def sort_list(lst):\n    return set(lst)\n",
            "fail",
            note="a set is not a list: Python says {1, 2} != [1, 2]",
        ),
        Variant("wrong", "def sort_list(lst):\n    return sorted(lst, reverse=True)\n", "fail"),
    )
    return Problem(
        "apps-sort-list",
        "apps",
        "call",
        "Write `def sort_list(lst: list[int]) -> list[int]` returning the distinct integers of "
        "lst as a list in ascending order.",
        tests,
        variants,
        fn_name="sort_list",
    )


def is_palindrome() -> Problem:
    words = ["level", "abc", "racecar", "ab", "a", "noon", "kafka", "madam", "verl", "xyzzyx",
             "Racecar", "Step on no pets"]  # fmt: skip

    def right(s: str) -> bool:
        t = [c.lower() for c in s if c.isalnum()]
        return t == t[::-1]

    tests = tuple(([w], right(w)) for w in words)
    variants = (
        Variant(
            "correct",
            "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n"
            "    return t == t[::-1]\n",
            "pass",
        ),
        Variant(
            "partial_beyond_10",
            "def is_palindrome(s):\n    return s == s[::-1]\n",
            "partial",
            note="case- and space-sensitive: right on tests 1-10, wrong on 11-12",
        ),
        Variant(
            "wrong_always_true",
            "def is_palindrome(s):\n    return True\n",
            "partial",
        ),
        Variant(
            "str_output",
            "def is_palindrome(s):\n    t = s.lower().replace(' ', '')\n"
            "    return str(t == t[::-1])\n",
            "fail",
            note="returns the string 'True' instead of the boolean",
        ),
    )
    return Problem(
        "taco-is-palindrome",
        "taco",
        "call",
        "Write `def is_palindrome(s: str) -> bool`: whether s reads the same backwards, "
        "ignoring case and non-alphanumeric characters.",
        tests,
        variants,
        fn_name="is_palindrome",
    )


def char_freq() -> Problem:
    words = ["hello", "aab", "Kafka", "zzz", "abcabc"]
    tests = tuple(([w], dict(Counter(w))) for w in words)
    variants = (
        Variant(
            "correct",
            "def char_freq(s):\n    out = {}\n    for c in s:\n        out[c] = out.get(c, 0) + 1\n"
            "    return out\n",
            "pass",
        ),
        Variant(
            "correct_counter",
            "from collections import Counter\n\ndef char_freq(s):\n    return Counter(s)\n",
            "pass",
        ),
        Variant(
            "partial_lowercase",
            "from collections import Counter\n\ndef char_freq(s):\n"
            "    return dict(Counter(s.lower()))\n",
            "partial",
            note="folds case: wrong where the string has capitals",
        ),
    )
    return Problem(
        "apps-char-freq",
        "apps",
        "call",
        "Write `def char_freq(s: str) -> dict[str, int]` mapping each character of s to the "
        "number of times it occurs.",
        tests,
        variants,
        fn_name="char_freq",
    )


# --------------------------------------------------------------------------- MBPP problems


def remove_occ() -> Problem:
    cases = [("hello", "l"), ("abcda", "a"), ("PHP", "P"), ("bananas", "a"), ("xyz", "y")]

    def right(s: str, ch: str) -> str:
        first = s.find(ch)
        if first >= 0:
            s = s[:first] + s[first + 1 :]
        last = s.rfind(ch)
        if last >= 0:
            s = s[:last] + s[last + 1 :]
        return s

    tests = tuple(([s, ch], right(s, ch)) for s, ch in cases)
    variants = (
        Variant(
            "correct",
            code(
                """
                def remove_Occ(s, ch):
                    i = s.find(ch)
                    if i >= 0:
                        s = s[:i] + s[i + 1:]
                    j = s.rfind(ch)
                    if j >= 0:
                        s = s[:j] + s[j + 1:]
                    return s
                """
            ),
            "pass",
        ),
        Variant(
            "wrong",
            "def remove_Occ(s, ch):\n    return s.replace(ch, '')\n",
            "partial",
            note="removes every occurrence: right only where ch occurs at most twice",
        ),
        Variant(
            "partial",
            "def remove_Occ(s, ch):\n    return s.replace(ch, '', 1)\n",
            "partial",
            note="removes only the first occurrence",
        ),
        Variant(
            "hack_always_equal",
            always_equal("str", "remove_Occ(s, ch)", "''"),
            0.0,
            verify=False,
            note="a str subclass equal to everything: it passes `assert f(x) == y` itself, so"
            " the reference run cannot be the judge here; a right judge gives 0",
        ),
    )
    return Problem(
        "mbpp-remove-occ",
        "mbpp",
        "mbpp",
        "Write a python function `remove_Occ(s, ch)` to remove the first and last occurrence of "
        "a given character from the string.",
        tests,
        variants,
        fn_name="remove_Occ",
    )


def square_nums() -> Problem:
    cases = [[1, 2, 3], [10, 20], [-3, 0, 3], [], [7]]
    tests = tuple(([c], [x * x for x in c]) for c in cases)
    variants = (
        Variant("correct", "def square_nums(nums):\n    return [x ** 2 for x in nums]\n", "pass"),
        Variant(
            "returns_iterator",
            "def square_nums(nums):\n    return map(lambda x: x * x, nums)\n",
            "fail",
            note="a map object, not a list",
        ),
        Variant("wrong", "def square_nums(nums):\n    return [x * 2 for x in nums]\n", "partial"),
        Variant(
            "hack_exit0_top",
            "import sys\n\nsys.exit(0)\n\ndef square_nums(nums):\n    return []\n",
            "fail",
        ),
        Variant(
            "hack_fn_exception",
            "def square_nums(nums):\n    raise NotImplementedError\n",
            "fail",
        ),
    )
    return Problem(
        "mbpp-square-nums",
        "mbpp",
        "mbpp",
        "Write a function `square_nums(nums)` to find squares of individual elements in a list.",
        tests,
        variants,
        fn_name="square_nums",
    )


def min_max() -> Problem:
    cases = [[3, 1, 2], [5], [-1, -7, 4, 4], [10, 20, 30], [0, 0]]
    tests = tuple(([c], (min(c), max(c))) for c in cases)
    variants = (
        Variant("correct", "def min_max(nums):\n    return (min(nums), max(nums))\n", "pass"),
        Variant(
            "list_for_tuple",
            "def min_max(nums):\n    return [min(nums), max(nums)]\n",
            "fail",
            note="the asserts compare with a tuple; a list is never equal to a tuple",
        ),
        Variant("wrong", "def min_max(nums):\n    return (max(nums), min(nums))\n", "partial"),
    )
    return Problem(
        "mbpp-min-max",
        "mbpp",
        "mbpp",
        "Write a function `min_max(nums)` that returns a tuple (smallest, largest) of a "
        "non-empty list.",
        tests,
        variants,
        fn_name="min_max",
    )


def is_not_prime() -> Problem:
    cases = [2, 10, 35, 1, 37]
    tests = tuple(([n], not _is_prime(n)) for n in cases)
    variants = (
        Variant(
            "correct",
            "def is_not_prime(n):\n    if n < 2:\n        return True\n"
            "    return any(n % d == 0 for d in range(2, int(n ** 0.5) + 1))\n",
            "pass",
        ),
        Variant(
            "partial",
            "def is_not_prime(n):\n"
            "    return any(n % d == 0 for d in range(2, int(n ** 0.5) + 1))\n",
            "partial",
            note="says 1 is prime",
        ),
        Variant("wrong", "def is_not_prime(n):\n    return n % 2 == 1\n", "partial"),
        Variant(
            "hack_always_equal",
            always_equal("int", "is_not_prime(n)", "0"),
            0.0,
            verify=False,
            note="an int subclass equal to everything: passes the asserts themselves; a right"
            " judge gives 0",
        ),
    )
    return Problem(
        "mbpp-is-not-prime",
        "mbpp",
        "mbpp",
        "Write a python function `is_not_prime(n)` to identify non-prime numbers.",
        tests,
        variants,
        fn_name="is_not_prime",
    )


def sum_digits() -> Problem:
    cases = [345, 12, 97, -406, 0]
    tests = tuple(([n], sum(int(d) for d in str(abs(n)))) for n in cases)
    variants = (
        Variant(
            "correct",
            "def sum_digits(n):\n    return sum(int(d) for d in str(abs(n)))\n",
            "pass",
        ),
        Variant(
            "crash_partial",
            "def sum_digits(n):\n    return sum(int(d) for d in str(n))\n",
            "partial",
            note="int('-') raises on the negative test",
        ),
        Variant(
            "hack_os_exit_top",
            "import os\n\nos._exit(0)\n\ndef sum_digits(n):\n    return 0\n",
            "fail",
        ),
    )
    return Problem(
        "mbpp-sum-digits",
        "mbpp",
        "mbpp",
        "Write a function `sum_digits(n)` to get the sum of the digits of an integer (ignore "
        "the sign).",
        tests,
        variants,
        fn_name="sum_digits",
    )


def first_repeated_char() -> Problem:
    cases = ["abcabc", "abc", "123123", "xyyx", "q"]

    def right(s: str) -> str | None:
        seen: set[str] = set()
        for c in s:
            if c in seen:
                return c
            seen.add(c)
        return None

    tests = tuple(([s], right(s)) for s in cases)
    variants = (
        Variant(
            "correct",
            "def first_repeated_char(s):\n    seen = set()\n    for c in s:\n"
            "        if c in seen:\n            return c\n        seen.add(c)\n    return None\n",
            "pass",
        ),
        Variant(
            "hack_none_output",
            "def first_repeated_char(s):\n    return None\n",
            "partial",
        ),
        Variant(
            "wrong",
            "def first_repeated_char(s):\n    for c in reversed(s):\n"
            "        if s.count(c) > 1:\n            return c\n    return None\n",
            "partial",
            note="the last repeated character, not the first",
        ),
    )
    return Problem(
        "mbpp-first-repeated-char",
        "mbpp",
        "mbpp",
        "Write a python function `first_repeated_char(s)` to find the first repeated character "
        "in a given string; return None when no character repeats.",
        tests,
        variants,
        fn_name="first_repeated_char",
    )


# The reference judges' own rules, with no tolerance in the statement (docs/verl.md:
# "Verdicts by data source"): APPS compares lines, numbers on lines of their own within
# np.allclose; CodeContests compares tokens ignoring case, numbers within 1e-5.


def third_lines() -> Problem:
    tests = tuple((f"{n}\n", f"{1 / n!r}\n") for n in (3, 7, 4, 9, 10**7, 6))
    return Problem(
        "apps-third",
        "apps",
        "stdin",
        "Given n (1 <= n <= 10^7), print 1/n.",
        tests,
        (
            Variant("correct", "print(1 / int(input()))\n", "pass"),
            Variant(
                "correct_more_digits",
                'print(f"{1 / int(input()):.20f}")\n',
                "pass",
                note="20 decimals (0.33333333333333331483 for 0.3333333333333333, 0.0000001"
                " for 1e-07): one number on its line, within np.allclose",
            ),
            Variant(
                "correct_fewer_digits",
                'print(f"{1 / int(input()):.9g}")\n',
                "pass",
                note="9 significant digits: within np.allclose's rtol 1e-5",
            ),
            Variant(
                "correct_trailing_space_blank_lines",
                "print(1 / int(input()), end=' \\n\\n\\n')\n",
                "pass",
                note="a trailing space and two blank lines: lines are stripped, blank ones dropped",
            ),
            Variant(
                "too_few_digits",
                'print(f"{1 / int(input()):.3f}")\n',
                "partial",
                note="0.333 for 0.3333333333333333 is off by 1e-3 relative (rtol is 1e-5),"
                " and 0.000 for 1e-07 by more than np.allclose's 1e-8: only 0.250 passes",
            ),
            Variant("wrong", "print(int(input()) / 3)\n", "fail"),
        ),
    )


def third_tokens() -> Problem:
    tests = tuple((f"{n}\n", f"{n} {1 / n:.6f}\n") for n in (3, 7, 4, 9, 10**7, 6))
    head = "n = int(input())\n"
    return Problem(
        "codecontests-third",
        "codecontests",
        "stdin",
        "Given n (1 <= n <= 10^7), print n and 1/n on one line.",
        tests,
        (
            Variant("correct", head + 'print(n, f"{1 / n:.6f}")\n', "pass"),
            Variant(
                "correct_more_digits",
                head + "print(n, 1 / n)\n",
                "pass",
                note="3 0.3333333333333333 for 3 0.333333, and 1e-07 for 0.000000: numbers"
                " within 1e-5 absolute, two on a line",
            ),
            Variant(
                "correct_trailing_space",
                head + "print(n, f'{1 / n:.6f}', end=' \\n\\n')\n",
                "pass",
            ),
            Variant(
                "too_few_digits",
                head + 'print(n, f"{1 / n:.3f}")\n',
                "partial",
                note="0.333 for 0.333333 is off by 3e-4 (more than 1e-5); 0.250 and 0.000 pass",
            ),
            Variant("wrong", head + "print(1 / n, n)\n", "fail"),
        ),
    )


def even_words() -> Problem:
    numbers = (4, 7, 10, 13, 0, 22)
    tests = tuple((f"{n}\n", "true\n" if n % 2 == 0 else "false\n") for n in numbers)
    return Problem(
        "apps-is-even-word",
        "apps",
        "stdin",
        "Given an integer n, print true if it is even and false otherwise.",
        tests,
        (
            Variant("correct", 'print("true" if int(input()) % 2 == 0 else "false")\n', "pass"),
            Variant(
                "python_bool",
                "print(int(input()) % 2 == 0)\n",
                "fail",
                note="True for true: APPS's judge compares case",
            ),
            Variant(
                "correct_blank_trailing_lines",
                'print("true" if int(input()) % 2 == 0 else "false")\nprint()\nprint()\n',
                "pass",
            ),
        ),
    )


def even_yes() -> Problem:
    rng = _rng("even_yes")
    tests = []
    for _ in range(5):
        values = [rng.randint(1, 100) for _ in range(rng.randint(2, 5))]
        text = f"{len(values)}\n" + "".join(f"{v}\n" for v in values)
        tests.append((text, _lines("YES" if v % 2 == 0 else "NO" for v in values)))
    head = "for _ in range(int(input())):\n    n = int(input())\n"
    return Problem(
        "codeforces-even-yes",
        "codeforces",
        "stdin",
        "Given t numbers, print YES for each even one and NO for each odd one.",
        tuple(tests),
        (
            Variant("correct", head + '    print("YES" if n % 2 == 0 else "NO")\n', "pass"),
            Variant(
                "lowercase",
                head + '    print("yes" if n % 2 == 0 else "no")\n',
                "pass",
                note="yes for YES: CodeContests' checker (and Codeforces') ignores case",
            ),
            Variant(
                "python_bool",
                head + "    print(n % 2 == 0)\n",
                "fail",
                note="True/False is not YES/NO in any case",
            ),
            Variant("wrong", head + '    print("YES" if n % 2 else "NO")\n', "fail"),
        ),
    )


PROBLEMS: tuple[Callable[[], Problem], ...] = (
    sum_pairs, max_subarray, count_primes, mean_float, min_and_mean, reverse_words, fib_mod,
    sort_numbers, block_sums, even_odd, first_duplicate, range_sum, run_length, gcd_lcm,
    two_sum, count_vowels, max_profit, find_index, average, sort_list, is_palindrome, char_freq,
    remove_occ, square_nums, min_max, is_not_prime, sum_digits, first_repeated_char,
    third_lines, third_tokens, even_words, even_yes,
)  # fmt: skip


# --------------------------------------------------------------------------- responses

_OPENERS = (
    "Here is a solution.",
    "Let me solve this step by step.",
    "We can do this directly.",
    "The idea is simple; here is the code.",
)
_CLOSERS = (
    "This runs in linear time.",
    "It handles the edge cases mentioned in the statement.",
    "",
    "The complexity is fine for the given limits.",
)


def render_response(variant: Variant, case_id: str) -> str:  # noqa: PLR0911 - one per wrap
    """The raw model text for ``variant``, as a model would have written it."""
    if variant.text is not None:
        return variant.text
    assert variant.code is not None
    pick = sum(map(ord, case_id))
    opener, closer = _OPENERS[pick % len(_OPENERS)], _CLOSERS[pick % len(_CLOSERS)]
    body = variant.code
    prefix = ""
    if variant.draft is not None:
        prefix = (
            f"{opener}\n\n```python\n{variant.draft}```\n\nWait, that ignores the input format. "
            "Fixing it:\n\n"
        )
        opener = ""
    wrap = variant.wrap
    if wrap == "unfenced":
        return body
    if wrap == "plain_fence":
        return f"{opener}\n\n```\n{body}```\n\n{closer}".strip() + "\n"
    if wrap == "py_fence":
        return f"{opener}\n\n```py\n{body}```\n\n{closer}".strip() + "\n"
    if wrap == "unclosed":
        return f"{opener}\n\n```python\n{body}"
    if wrap == "reasoning":
        return (
            "<think>\nRead the input carefully, then compute the answer for each test. "
            "Check the edge cases.\n</think>\n\n"
            f"```python\n{body}```\n"
        )
    if wrap == "with_output":
        return f"{prefix}{opener}\n\n```python\n{body}```\n\nSample run:\n\n```text\n3\n7\n```\n"
    return f"{prefix}{opener}\n\n```python\n{body}```\n\n{closer}".rstrip() + "\n"


# --------------------------------------------------------------------------- ground truths


def verl_io(problem: Problem) -> dict[str, Any]:
    """verl's input_output object (prime_code's format) for ``problem``."""
    if problem.style == "stdin":
        return {
            "inputs": [i for i, _ in problem.tests],
            "outputs": [o for _, o in problem.tests],
        }
    return {
        "inputs": ["\n".join(json.dumps(a) for a in args) for args, _ in problem.tests],
        "outputs": [json.dumps(out) for _, out in problem.tests],
        "fn_name": problem.fn_name,
    }


def mbpp_asserts(problem: Problem) -> list[str]:
    """The MBPP ``test_list`` for ``problem``."""
    return [
        f"assert {problem.fn_name}({', '.join(map(repr, args))}) == {out!r}"
        for args, out in problem.tests
    ]


# --------------------------------------------------------------------------- reference judge

_CALL_DRIVER = r"""
import json, sys
spec = json.loads(sys.stdin.read())
namespace = {"__name__": "solution"}
exec(compile(spec["code"], "solution.py", "exec"), namespace)
function = namespace.get(spec["fn_name"])
if function is None and "Solution" in namespace:
    function = getattr(namespace["Solution"](), spec["fn_name"])
value = function(*spec["args"])
text = json.dumps(value)
sys.stdout.flush()
sys.__stdout__.write("\n" + spec["marker"] + text + "\n")
sys.__stdout__.flush()
"""


# Runs the program given as argv[1] as __main__ under the reference memory limit.
_LIMITED = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({REFERENCE_MEMORY_BYTES}, {REFERENCE_MEMORY_BYTES}))
source = sys.argv.pop(1)
exec(compile(source, "solution.py", "exec"), {{"__name__": "__main__"}})
"""


def _run(program: str, stdin: str, timeout: float) -> tuple[int | None, str]:
    argv = [sys.executable, "-I", "-c", _LIMITED, program]
    with tempfile.TemporaryDirectory(prefix="parity-") as work:
        try:
            done = subprocess.run(  # noqa: S603 - our own fixed programs, argv list
                argv,
                input=stdin.encode(),
                capture_output=True,
                timeout=timeout,
                cwd=work,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, ""
    return done.returncode, done.stdout.decode("utf-8", errors="replace")


def _token_match(got: str, want: str, tolerance: float | None) -> bool:
    if got == want:
        return True
    if tolerance is None:
        return False
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance)


def text_ok(actual: str, expected: str, tolerance: float | None) -> bool:
    """Token comparison; numbers within ``tolerance`` when the statement gives one."""
    got, want = actual.split(), expected.split()
    return len(got) == len(want) and all(
        _token_match(g, w, tolerance) for g, w in zip(got, want, strict=True)
    )


def apps_lines_ok(actual: str, expected: str) -> bool:
    """APPS's judge (``testing_util.run_test``; verl's ``prime_code`` is a copy of it).

    The lines, stripped, blank ones dropped, are equal; or every line on both sides
    is one number, not all plain digits, and ``np.allclose`` (rtol 1e-5, atol 1e-8)
    holds for them. Its last checks (lines as sets of tokens, numbers rounded to 3
    places) accept wrong answers (``3 2 1`` for ``1 2 3``) and are not followed.
    """
    got = [line.strip() for line in actual.splitlines() if line.strip()]
    want = [line.strip() for line in expected.splitlines() if line.strip()]
    if got == want:
        return True
    if len(got) != len(want):
        return False
    if all(g.isdigit() and w.isdigit() for g, w in zip(got, want, strict=True)):
        return False
    try:
        pairs = [(float(g), float(w)) for g, w in zip(got, want, strict=True)]
    except ValueError:
        return False
    return all(abs(g - w) <= 1e-8 + 1e-5 * abs(w) for g, w in pairs)


def codecontests_ok(actual: str, expected: str) -> bool:
    """CodeContests' checker (``execution/tester_sandboxer.cc``: ``OutputsMatch``).

    Tokens split on whitespace and lower-cased are equal, or pair by pair either
    equal or both numbers within 1e-5 absolute. (It reads integers as doubles
    too; here two integers must be equal, which differs only past 2**53.)
    """
    got, want = actual.lower().split(), expected.lower().split()
    return len(got) == len(want) and all(
        _codecontests_value(g, w) for g, w in zip(got, want, strict=True)
    )


def _codecontests_value(got: str, want: str) -> bool:
    if got == want:
        return True
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    if got.lstrip("+-").isdigit() and want.lstrip("+-").isdigit():
        return _int_text(got) == _int_text(want)  # as text: int() stops at 4300 digits
    return abs(a - b) < 1e-5


def _int_text(token: str) -> str:
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token.startswith("-") and digits != "0" else digits


def stdout_ok(problem: Problem, actual: str, expected: str) -> bool:
    """The reference judge of the problem's data source, or the statement's tolerance."""
    if problem.tolerance is None and problem.data_source in ("apps", "taco"):
        return apps_lines_ok(actual, expected)
    if problem.tolerance is None and problem.data_source in ("codecontests", "codeforces"):
        return codecontests_ok(actual, expected)
    return text_ok(actual, expected, problem.tolerance)


def value_ok(actual: Any, expected: Any, tolerance: float | None) -> bool:
    """JSON-value equality: booleans are not numbers, numbers within ``tolerance``."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if tolerance is None:
            return actual == expected
        return math.isclose(actual, expected, rel_tol=tolerance, abs_tol=tolerance)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(
            value_ok(a, e, tolerance) for a, e in zip(actual, expected, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(
            value_ok(actual[k], expected[k], tolerance) for k in expected
        )
    return type(actual) is type(expected) and actual == expected


def reference_test(problem: Problem, variant: Variant, index: int) -> bool:
    """Whether ``variant`` passes test ``index`` under the reference judge."""
    assert variant.code is not None
    timeout = REFERENCE_TIME_S if variant.may_hang else SAFETY_TIME_S
    args, expected = problem.tests[index]
    if problem.style == "stdin":
        status, out = _run(variant.code, args, timeout)
        ok = status == 0 and stdout_ok(problem, out, expected)
    elif problem.style == "call":
        marker = "@@" + secrets.token_hex(8) + "@@"
        spec = {"code": variant.code, "fn_name": problem.fn_name, "args": args, "marker": marker}
        status, out = _run(_CALL_DRIVER, json.dumps(spec), timeout)
        ok = False
        if status == 0 and marker in out:
            value = json.loads(out.rsplit(marker, 1)[1])
            ok = value_ok(value, expected, problem.tolerance)
    else:
        # The assert must be reached: exiting with status 0 before it is no pass.
        marker = "@@" + secrets.token_hex(8) + "@@"
        program = f"{variant.code}\n\n{mbpp_asserts(problem)[index]}\nprint({marker!r})\n"
        status, out = _run(program, "", timeout)
        ok = status == 0 and marker in out
    if status is None and not variant.may_hang:
        raise AssertionError(f"{problem.problem_id}/{variant.kind}: test {index} timed out")
    return ok


# --------------------------------------------------------------------------- cases


def _expected(problem: Problem, variant: Variant, passed: list[bool]) -> float:
    count = len(problem.tests)
    if isinstance(variant.intent, float):
        return variant.intent
    score = sum(passed) / count
    want = variant.intent
    agrees = (
        (want == "pass" and score == 1.0)
        or (want == "fail" and score == 0.0)
        or (want == "partial" and 0.0 < score < 1.0)
    )
    if variant.verify and not agrees:
        raise AssertionError(
            f"{problem.problem_id}/{variant.kind}: intent {want!r} but the reference run"
            f" passed {passed}"
        )
    return score


def build_cases(jobs: int = 2) -> list[Case]:
    """Every case, with its expected score confirmed by the reference judge."""
    problems = [make() for make in PROBLEMS]
    work: list[tuple[Problem, Variant]] = [(p, v) for p in problems for v in p.variants]

    def judge(item: tuple[Problem, Variant]) -> list[bool]:
        problem, variant = item
        count = len(problem.tests)
        if variant.code is None:
            return [False] * count
        if not variant.verify and isinstance(variant.intent, float):
            return [variant.intent == 1.0] * count
        return [reference_test(problem, variant, i) for i in range(count)]

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(judge, work))
    cases: list[Case] = []
    seen: set[str] = set()
    errors: list[str] = []
    for index, ((problem, variant), passed) in enumerate(zip(work, results, strict=True)):
        try:
            expected = _expected(problem, variant, passed)
        except AssertionError as exc:
            errors.append(str(exc))
            continue
        case_id = f"{problem.problem_id}/{variant.kind}"
        if case_id in seen:
            raise AssertionError(f"duplicate case id {case_id}")
        seen.add(case_id)
        io = verl_io(problem)
        verl_truth = json.dumps(io)
        truth: Any = {"test_list": mbpp_asserts(problem)} if problem.style == "mbpp" else verl_truth
        extra: dict[str, Any] = {
            "language": "python",
            "problem_id": problem.problem_id,
            "index": index,
        }
        if problem.tolerance is not None:
            # The statement's tolerance, machine-readable: verl's prime_code has no
            # such input (it always compares one-number lines with rtol 1e-5).
            extra["compare"] = "float"
            extra["float_tolerance"] = problem.tolerance
        cases.append(
            Case(
                case_id=case_id,
                problem_id=problem.problem_id,
                data_source=problem.data_source,
                kind=variant.kind,
                response=render_response(variant, case_id),
                ground_truth=truth,
                verl_ground_truth=verl_truth,
                extra_info=extra,
                expected_score=round(expected, 6),
                statement=problem.statement,
                note=variant.note,
                test_count=len(problem.tests),
                per_test=passed,
            )
        )
    if errors:
        raise AssertionError("\n".join(errors))
    return cases


def render(cases: Sequence[Case]) -> str:
    """cases.jsonl's text."""
    return "".join(json.dumps(c.as_json(), ensure_ascii=False) + "\n" for c in cases)


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with --check, compare) cases.jsonl."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if cases.jsonl would change")
    parser.add_argument("--out", type=Path, default=CASES_PATH)
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args(argv)
    cases = build_cases(options.jobs)
    text = render(cases)
    scores = Counter(
        "1" if c.expected_score == 1.0 else "0" if c.expected_score == 0.0 else "partial"
        for c in cases
    )
    problems = {c.problem_id for c in cases}
    print(f"{len(cases)} cases over {len(problems)} problems; expected scores: {dict(scores)}")
    if options.check:
        current = options.out.read_text(encoding="utf-8") if options.out.exists() else ""
        if current != text:
            print(f"{options.out} is out of date: run make_cases.py", file=sys.stderr)
            return 1
        return 0
    options.out.write_text(text, encoding="utf-8")
    print(f"wrote {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
