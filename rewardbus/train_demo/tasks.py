"""The train demo's task family: complete a two-argument function's ``return`` expression.

Each task is a HumanEval-style prompt, a function header whose *name* says what it
must compute::

    def add(a, b):
        return

and the policy writes the expression that follows (``a+b``). The program judged
is the header plus the response; its tests are ``assert add(6, 1) == 7`` style
cases, one test each, so the reward is the fraction of cases passed.

Why this family learns from scratch in minutes on two cores:

- Responses are short expressions over a tiny grammar (:mod:`.grammar`), so a
  random policy already writes valid programs, and right answers are three to
  five characters long.
- Partial credit comes from related expressions agreeing with the target on some
  inputs (``a`` passes ``add(3, 0) == 3``, ``a+b`` passes ``inc(6, 1) == 7``), so a
  random policy earns a low but non-zero reward (about 0.06) and GRPO's
  group-relative signal has somewhere to climb from.
- What was measured to make it learn reliably (tuning with :func:`local_score`,
  several seeds): every answer needs an operator (a task answered by ``a`` alone
  taught the policy to stop early everywhere, a trap for the other tasks), the
  answers overlap in structure (``a*a``, ``a*a*a``, ``a*b``) so the policy must
  read the function name, and the inputs were picked among small pairs so that
  short wrong answers earn little on most tasks.

This module is pure Python (no torch, no Kafka, no wire types), so the GPU
benchmark can import it. :func:`local_score` is a plain in-process checker of
the same family, for that benchmark and for tuning; the demo's rewards never
come from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "BEHAVIOURS",
    "Behaviour",
    "Case",
    "Task",
    "evaluate",
    "local_score",
    "task_family",
]

# Inputs every behaviour is tested on: of 1,500 random sets of four pairs from 0..7,
# one where wrong one- and two-operand answers score least on average across the
# family while a random policy still scores above zero.
_INPUTS: tuple[tuple[int, int], ...] = ((6, 1), (5, 3), (6, 5), (3, 0))


@dataclass(frozen=True)
class Behaviour:
    """A target behaviour: the function name shown in the prompt and a reference expression."""

    name: str
    reference: str


# Each reference is itself a sentence of the grammar, so every task is solvable.
BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour("add", "a+b"),
    Behaviour("sub", "a-b"),
    Behaviour("mul", "a*b"),
    Behaviour("double", "2*a"),
    Behaviour("square", "a*a"),
    Behaviour("cube", "a*a*a"),
    Behaviour("inc", "a+1"),
    Behaviour("dec", "a-1"),
)


@dataclass(frozen=True)
class Case:
    """One test: ``name(a, b) == expected``."""

    a: int
    b: int
    expected: int


@dataclass(frozen=True)
class Task:
    """One prompt of the family, with its test cases."""

    behaviour: Behaviour
    cases: tuple[Case, ...]

    @property
    def name(self) -> str:
        """The function name (the task's id within the family)."""
        return self.behaviour.name

    @property
    def header(self) -> str:
        """The prompt: the function header, up to where the expression goes."""
        return f"def {self.name}(a, b):\n    return "

    def program(self, response: str) -> str:
        """The program judged for ``response``: the header completed by it."""
        return f"{self.header}{response}\n"

    def assert_cases(self) -> list[str]:
        """The cases as assert statements, one test each."""
        return [f"assert {self.name}({c.a}, {c.b}) == {c.expected}" for c in self.cases]


def task_family(behaviours: Sequence[Behaviour] = BEHAVIOURS) -> tuple[Task, ...]:
    """One task per behaviour, its expected values computed from the reference expression."""
    tasks = []
    for behaviour in behaviours:
        cases = []
        for a, b in _INPUTS:
            expected = evaluate(behaviour.reference, a, b)
            if expected is None:
                raise ValueError(f"reference of {behaviour.name!r} is not a valid expression")
            cases.append(Case(a=a, b=b, expected=expected))
        tasks.append(Task(behaviour=behaviour, cases=tuple(cases)))
    return tuple(tasks)


_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


def evaluate(expression: str, a: int, b: int) -> int | None:
    """The value of a grammar sentence (operands a, b and digits; ``+ - *``), else None.

    A two-level precedence evaluation, not ``eval``: the local checker must not run
    arbitrary text, and the grammar is small enough to interpret directly.
    """
    tokens = expression.replace(" ", "")
    if not tokens or len(tokens) % 2 == 0:
        return None
    values: list[int] = []
    operators: list[str] = []
    for index, token in enumerate(tokens):
        if index % 2 == 0:
            operand = _operand(token, a, b)
            if operand is None:
                return None
            values.append(operand)
        elif token in _PRECEDENCE:
            while operators and _PRECEDENCE[operators[-1]] >= _PRECEDENCE[token]:
                _reduce(values, operators)
            operators.append(token)
        else:
            return None
    while operators:
        _reduce(values, operators)
    return values[0]


def _operand(symbol: str, a: int, b: int) -> int | None:
    if symbol == "a":
        return a
    if symbol == "b":
        return b
    return int(symbol) if symbol.isdigit() else None


def _reduce(values: list[int], operators: list[str]) -> None:
    right, left, operator = values.pop(), values.pop(), operators.pop()
    if operator == "+":
        values.append(left + right)
    elif operator == "-":
        values.append(left - right)
    else:
        values.append(left * right)


def local_score(task: Task, response: str) -> float:
    """Fraction of ``task``'s cases that ``response`` passes, computed in-process.

    A plain local checker of the same family: the GPU benchmark (no Kafka, no
    sandbox there) and hyper-parameter tuning use it. The train demo does not.
    """
    passed = sum(1 for c in task.cases if evaluate(response, c.a, c.b) == c.expected)
    return passed / len(task.cases)
