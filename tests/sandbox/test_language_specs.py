"""Every added language's assert suites, reward hacks, checker and compile cache, in the real jail.

The specs are in ``tests/sandbox/specs/`` (one module per language); their stdin/stdout
programs (every verdict, every limit) run in ``test_languages.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_workers import Executor, ExecutorConfig
from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from schemas import (
    AssertSuite,
    CheckerProgram,
    CheckerSuite,
    Completion,
    Limits,
    RewardEvent,
    TestSuite,
    Verdict,
)
from tests.sandbox.specs import LanguageSpec, all_specs

pytestmark = pytest.mark.sandbox

SPECS = all_specs()
LIMITS = Limits(time_s=2.0, total_time_s=20.0, memory_mb=256, output_kb=64)
AC, WA = Verdict.ACCEPTED, Verdict.WRONG_ANSWER


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Executor]:
    try:
        sandbox = JailSandbox(JailConfig(strict=False))
    except IsolationUnavailable as exc:
        pytest.fail(f"no jail on this host (see rewardbus doctor): {exc}")
    cache = tmp_path_factory.getbasetemp() / "spec-executor-cache"
    yield Executor(ExecutorConfig(compile_cache_dir=cache), sandbox)
    sandbox.close()


# Their compilers take seconds per program (kotlinc, scalac, GHC): each hack is a compile,
# so their hack tests run in `make test` only, not in the fast loop (`-m "not slow"`).
SLOW_COMPILERS = frozenset({"kotlin", "scala", "haskell"})


def _params(pick: str) -> list[object]:
    return [
        pytest.param(
            spec,
            name,
            code,
            id=f"{spec.language}-{name}",
            marks=[pytest.mark.slow] if spec.language in SLOW_COMPILERS else [],
        )
        for spec in SPECS
        for name, code in getattr(spec, pick).items()
    ]


async def _run(executor: Executor, spec: LanguageSpec, code: str, suite: TestSuite) -> RewardEvent:
    return await executor.run(
        Completion(sample_id="s", language=spec.language, code=code, tests=suite, limits=LIMITS)
    )


@pytest.mark.parametrize("spec", SPECS, ids=[s.language for s in SPECS])
async def test_assert_suite(executor: Executor, spec: LanguageSpec) -> None:
    suite = AssertSuite(code=spec.assert_tests)
    good = await _run(executor, spec, spec.assert_good, suite)
    assert (good.verdict, good.score) == (AC, 1.0), (good.message, good.stderr_tail)
    bad = await _run(executor, spec, spec.assert_bad, suite)
    assert (bad.verdict, bad.score) == (WA, 0.0), (bad.message, bad.stderr_tail)


@pytest.mark.parametrize(("spec", "name", "hack"), _params("exit_hacks"))
async def test_a_program_cannot_exit_before_the_asserts(
    executor: Executor, spec: LanguageSpec, name: str, hack: str
) -> None:
    """A reward hack: an assert suite passes when its process exits 0, so a program that
    leaves before the asserts ran would pass them all."""
    del name
    event = await _run(executor, spec, hack, AssertSuite(code=spec.assert_tests))
    assert event.verdict is not AC and event.score == 0.0, (event.message, event.stderr_tail)


@pytest.mark.parametrize(("spec", "name", "hack"), _params("disable_hacks"))
async def test_a_program_cannot_switch_off_the_asserts(
    executor: Executor, spec: LanguageSpec, name: str, hack: str
) -> None:
    del name
    event = await _run(executor, spec, hack, AssertSuite(code=spec.assert_tests))
    assert (event.verdict, event.score) == (WA, 0.0), (event.message, event.stderr_tail)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.checker], ids=lambda s: s.language)
async def test_checker(executor: Executor, spec: LanguageSpec) -> None:
    suite = CheckerSuite(
        inputs=["7", "7"],
        outputs=["3", "4"],
        checker=CheckerProgram(language=spec.language, code=spec.checker),
    )
    # 10 = 3 (mod 7), != 4 (mod 7)
    event = await executor.run(
        Completion(sample_id="s", language="python", code="print(10)\n", tests=suite, limits=LIMITS)
    )
    assert [t.verdict for t in event.tests] == [AC, WA], (event.message, event.tests)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.compiled], ids=lambda s: s.language)
async def test_compiles_are_cached_and_errors_carry_the_compilers_message(
    executor: Executor, spec: LanguageSpec
) -> None:
    suite = AssertSuite(code=spec.assert_tests)
    await _run(executor, spec, spec.assert_good, suite)
    misses = executor.compile_cache.stats.misses
    event = await _run(executor, spec, spec.assert_good, suite)
    assert event.verdict is AC
    assert executor.compile_cache.stats.misses == misses
    broken = await _run(executor, spec, spec.programs[Verdict.COMPILE_ERROR], suite)
    assert broken.verdict is Verdict.COMPILE_ERROR and broken.message.strip()


# MultiPL-E's Perl tests, verbatim in shape: they need Test::Deep (libtest-deep-perl).
_PERL_TEST_DEEP = """use Test::Deep;

sub testhumaneval {
    my $candidate = \\&add;
        if(eq_deeply($candidate->(2, 3),5)) {
        print "ok!" }else{
        exit 1;
        }
        if(eq_deeply($candidate->(-1, 1),0)) {
        print "ok!" }else{
        exit 1;
        }
}

testhumaneval();
"""


async def test_multipl_e_perl_tests_find_test_deep(executor: Executor) -> None:
    suite = AssertSuite(code=_PERL_TEST_DEEP)
    add = "sub add {{ my ($a, $b) = @_; return $a {} $b; }}\n"
    spec = next(s for s in SPECS if s.language == "perl")
    good = await _run(executor, spec, add.format("+"), suite)
    assert (good.verdict, good.score) == (AC, 1.0), (good.message, good.stderr_tail)
    bad = await _run(executor, spec, add.format("*"), suite)
    assert (bad.verdict, bad.score) == (WA, 0.0), (bad.message, bad.stderr_tail)
