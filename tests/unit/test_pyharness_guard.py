"""The Python assert harness's comparison guard, in process (the sandbox tests run it jailed).

The tests' single ``==``, ``!=``, ``in`` and ``not in`` are compiled to calls of
``_compare``: it must keep what the comparison returns, leave plain data alone, and
fail only a value that also equals what it cannot equal.
"""

from __future__ import annotations

import ast
import json
import marshal
from fractions import Fraction
from typing import Any

import pytest

from sandbox_workers.judging import pyharness as harness
from sandbox_workers.judging.harness import HarnessPlan, TestCodeCache


def _run(code: str, **names: Any) -> dict[str, Any]:
    namespace = {**names, **_injected()}
    exec(harness._compile_tests(code, "tests.py"), namespace)
    return namespace


class _AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class _Ambiguous:
    def __bool__(self) -> bool:
        raise ValueError("the truth value of an array is ambiguous")


class _Elementwise:
    """An array-like whose == returns an array of results, which has no truth (numpy's)."""

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return _Ambiguous()

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        (1, True),
        ("a", True),
        (None, True),
        ([1, (2.0, "x"), {3: [b"y"]}], True),
        (frozenset({1, 2}), True),
        ([1, Fraction(1, 2)], False),
        ({"a": object()}, False),
        (True, True),
    ],
)
def test_plain_data_is_builtin_scalars_and_containers_of_them(value: Any, plain: bool) -> None:
    assert harness._plain(value) is plain


def test_a_container_holding_itself_is_not_plain_and_does_not_recurse_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert harness._plain(loop) is False


def test_the_tests_comparisons_keep_their_results() -> None:
    found = _run(
        "a = x == 2\nb = x != 2\nc = x in (1, 2)\nd = x not in [2]\ne = y == 5\n"
        "f = 1 < x < 3\ng = 3 < x < 9\nh = 1 < x < 0\n",
        x=2,
        y=_Elementwise(),
    )
    assert (found["a"], found["b"], found["c"], found["d"]) == (True, False, True, False)
    assert type(found["e"]) is _Ambiguous  # not turned into a bool
    assert (found["f"], found["g"], found["h"]) == (True, False, False)  # chains as Python


def test_a_value_equal_to_anything_fails_the_comparison_that_trusts_it() -> None:
    with pytest.raises(harness._NotAnEquality, match="its comparison is not an equality"):
        _run("assert got == 6\n", got=_AlwaysEqual())
    with pytest.raises(harness._NotAnEquality):
        _run("assert 6 == got\n", got=_AlwaysEqual())  # either side
    with pytest.raises(harness._NotAnEquality):
        _run("assert [6] == got\n", got=[_AlwaysEqual()])  # inside a list
    with pytest.raises(harness._NotAnEquality):
        _run("assert got == [1, 2, 3]\n", got=[1, _AlwaysEqual(), 3])  # at any place
    with pytest.raises(harness._NotAnEquality):
        _run("assert got == {'a': 1, 'b': 2}\n", got={"a": 1, "b": _AlwaysEqual()})
    with pytest.raises(harness._NotAnEquality):
        _run("assert got in [1, 2]\n", got=_AlwaysEqual())
    with pytest.raises(harness._NotAnEquality):
        _run("assert (2, got) in [(1, 1), (2, 2)]\n", got=_AlwaysEqual())


def test_honest_values_of_other_types_are_left_alone() -> None:
    _run("assert got == 0.5\nassert got != 1\nassert got in [0.5]\n", got=Fraction(1, 2))
    with pytest.raises(AssertionError):
        _run("assert got == 1\n", got=Fraction(1, 2))  # an honest inequality


def test_the_expected_value_changed_catches_an_equality_that_checks_only_types() -> None:
    class SameType:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, int)

        __hash__ = object.__hash__

    with pytest.raises(harness._NotAnEquality, match="compared equal to 7"):
        _run("assert got == 6\n", got=SameType())


def test_an_ordering_true_against_nan_is_a_fake() -> None:
    class Below:
        def __lt__(self, other: object) -> bool:
            return True

    with pytest.raises(harness._NotAnEquality, match="is not an ordering"):
        _run("assert got < 1e-6\n", got=Below())
    _run("assert got < 1\nassert 0 <= got\n", got=Fraction(1, 2))  # honest


def test_a_difference_that_ignores_what_is_subtracted_is_a_fake() -> None:
    class Zero:
        def __sub__(self, other: object) -> int:
            return 0

        def __rsub__(self, other: object) -> int:
            return 0

    with pytest.raises(harness._NotAnEquality, match="is not a subtraction"):
        _run("assert abs(got - 2.5) < 1e-6\n", got=Zero())
    with pytest.raises(harness._NotAnEquality, match="is not a subtraction"):
        _run("assert abs(2.5 - got) < 1e-6\n", got=Zero())
    found = _run("d = got - 2\nassert abs(got - 0.5) < 1e-6\n", got=Fraction(1, 2))  # honest
    assert found["d"] == Fraction(-3, 2)
    assert _run("d = 7 - 2\n")["d"] == 5


def test_each_link_of_a_chained_comparison_is_guarded() -> None:
    class Inside:
        def __le__(self, other: object) -> bool:
            return True

        __lt__ = __ge__ = __gt__ = __le__

    with pytest.raises(harness._NotAnEquality, match="is not an ordering"):
        _run("assert 0 <= got < 10\n", got=Inside())
    with pytest.raises(harness._NotAnEquality, match="is not an equality"):
        _run("assert got == 1 == one\n", got=_AlwaysEqual(), one=1)
    _run("assert 0 <= got < 1 <= 1\n", got=Fraction(1, 2))  # honest
    with pytest.raises(AssertionError):
        _run("assert 0 <= got < -1\n", got=Fraction(1, 2))


def test_a_chain_whose_later_operands_are_calls_keeps_python_s_short_circuit() -> None:
    """`a < b < f()` calls f only while the chain holds: such a chain is left as written."""
    calls: list[int] = []

    def later() -> int:
        calls.append(1)
        return 5

    found = _run("r = 3 < x < later()\n", x=1, later=later)
    assert found["r"] is False
    assert calls == []


def test_the_guard_is_found_from_a_class_of_the_tests() -> None:
    """unittest-style tests: a class body mangles `__names`; the guard's name is not one."""
    code = (
        "class TestTotal:\n"
        "    def test(self):\n"
        "        assert f(1) == 2\n"
        "        assert [f(2)] == [4]\n"
        "TestTotal().test()\n"
    )
    _run(code, f=lambda x: 2 * x)
    with pytest.raises(harness._NotAnEquality):
        _run(code, f=lambda x: _AlwaysEqual())


def test_with_an_entry_point_the_tests_builtins_are_the_real_ones() -> None:
    """HumanEval's tests reach the program only through `candidate`: a program's own
    `abs` (or `len`, `sum`) must not answer for the builtin the tests call."""
    code = "assert abs(candidate(1) - 2.5) < 1e-6\n"
    names = {"candidate": lambda x: 7.0, "abs": lambda x: 0}  # the program's abs
    with pytest.raises(AssertionError):
        exec(harness._compile_tests(code, "t", True), {**names, **_injected()})
    exec(harness._compile_tests(code, "t", False), {**names, **_injected()})  # MBPP: as written
    # A name the tests bind themselves is theirs.
    own = "def abs(x):\n    return 0\nassert abs(candidate(1) - 2.5) < 1e-6\n"
    exec(harness._compile_tests(own, "t", True), {**names, **_injected()})


def test_a_suite_is_compiled_once_and_its_code_is_guarded() -> None:
    cache = TestCodeCache()
    setup = "def check(candidate):\n    assert candidate(1) == 2\n"
    first = cache.get(setup, [None], protect_builtins=True)
    assert first is not None and first.guard_names == harness.guard_names()
    assert cache.get(setup, [None], protect_builtins=True) is first
    # Another suite, or the same one without protected builtins, is compiled apart.
    assert cache.get(setup, ["assert 1"], protect_builtins=True) is not first
    assert cache.get(setup, [None], protect_builtins=False) is not first
    # What the sandbox loads: the guard catches a value equal to anything.
    setup_code, cases = marshal.loads(first.code)
    assert cases == [None]
    namespace = _injected()
    exec(setup_code, namespace)
    namespace["check"](lambda x: 2)
    with pytest.raises(harness._NotAnEquality):
        namespace["check"](lambda x: _AlwaysEqual())


def test_a_suite_that_does_not_compile_is_left_to_the_harness_to_report() -> None:
    cache = TestCodeCache()
    assert cache.get("def check(candidate):\n    assert (\n", [None], protect_builtins=True) is None
    assert cache.get("ok = 1\n", ["assert ("], protect_builtins=False) is None


def test_a_compiled_suite_travels_without_its_source() -> None:
    tests: list[str | None] = ["assert f(1) == 1", "assert f(2) == 2"]
    compiled = TestCodeCache().get("", tests, protect_builtins=False)
    plan = HarnessPlan("python", "assert", tests, 1.0, 64, compiled=compiled)
    files = plan.files("def f(x):\n    return x\n", budget_s=5.0, stop_on_failure=False)
    spec = json.loads(files["spec.json"])
    assert spec["tests"] is None and spec["setup"] == ""
    assert (spec["count"], spec["compiled"]) == (2, "tests.marshal")
    assert spec["guard_names"] == list(harness.guard_names())
    assert compiled is not None and files["tests.marshal"] == compiled.code
    # Without it, the source goes in as before.
    plain = HarnessPlan("python", "assert", tests, 1.0, 64).files(
        "", budget_s=5.0, stop_on_failure=False
    )
    assert json.loads(plain["spec.json"])["tests"] == tests and "tests.marshal" not in plain


def _injected() -> dict[str, Any]:
    import builtins

    return {
        harness._GUARD: harness._compare,
        harness._CHAIN: harness._compare_chain,
        harness._BUILTINS: builtins,
    }


def test_every_node_the_guard_makes_has_the_place_of_the_node_it_replaces() -> None:
    """The guard gives its nodes their positions as it makes them (no second walk with
    ``ast.fix_missing_locations``): that walk must find nothing left to fix, and a
    failing assert's traceback points at its own line."""
    code = (
        "def check(f):\n"
        "    assert f(1) == 2\n"
        "    assert 0 < f(2) <= 3 and len([1]) in {1}\n"
        "    assert abs(f(3) - 1.5) < 1e-6\n"
        "    assert f(4) != 5, 'msg'\n"
    )
    tree = harness._GuardComparisons(frozenset({"len", "abs"})).visit(ast.parse(code))
    placed = ast.dump(tree, include_attributes=True)
    assert ast.dump(ast.fix_missing_locations(tree), include_attributes=True) == placed
    assert harness._GUARD in placed and harness._CHAIN in placed and harness._BUILTINS in placed
    namespace = _run(code)
    with pytest.raises(AssertionError) as failed:
        namespace["check"](lambda x: x + 10 if x == 3 else x + 1)
    assert failed.traceback[-1].lineno + 1 == 4  # 0-based in pytest's traceback


def test_the_program_s_code_travels_beside_its_source() -> None:
    code = marshal.dumps(compile("def f(x):\n    return x\n", "solution.py", "exec"))
    plan = HarnessPlan("python", "call", [[1]], 1.0, 64, fn_name="f")
    files = plan.files("def f(x):\n    return x\n", budget_s=5.0, stop_on_failure=False, code=code)
    assert json.loads(files["spec.json"])["program_code"] == "solution.marshal"
    assert files["solution.marshal"] == code and b"return x" in files["solution.py"]
    plain = plan.files("def f(x):\n    return x\n", budget_s=5.0, stop_on_failure=False)
    assert json.loads(plain["spec.json"])["program_code"] is None
    assert "solution.marshal" not in plain
