"""Sessions: one jail serving a suite's stdin tests, each run as fresh as a new jail's.

The leak corpus runs through a session in test_pollution.py; here: the limits of
each run, the files a run was given, per-run accounting, and a suite judged the
same through sessions as through one jail per test.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sandbox_workers import ExecRequest, ExecResult, Executor, ExecutorConfig
from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import ProgramSession, SessionSandbox
from schemas import Completion, IoSuite, Limits, Verdict
from tests.sandbox.jails import strict_sandbox

pytestmark = pytest.mark.sandbox

# What the program does is chosen by its stdin (a POSIX shell: no warm zygote).
SCRIPT = """
read what
case "$what" in
  double) read n; echo $((2 * n)) ;;
  spin) while :; do :; done ;;
  spam) while :; do echo yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy; done ;;
  hog) exec /usr/bin/tail /dev/zero ;;
  change) echo changed > given.txt; echo new > mine.txt; echo ok ;;
  look) cat given.txt; ls ;;
  meddle) touch /tmp/x /dev/shm/x x; rm /tmp/x /dev/shm/x x; mkdir d; rmdir d
          touch -d 2001-01-01 /tmp /dev/shm /work; chmod 700 /work; echo ok ;;
  confined) cat /proc/self/status ;;
  stat) stat -c '%n %a %u %g %Y %X' /work /tmp /dev/shm; ls -A /work /tmp /dev/shm ;;
esac
"""


def request(stdin: str = "", *, time_s: float = 1.0) -> ExecRequest:
    return ExecRequest(
        argv=("/bin/sh", "prog.sh"),
        files={"prog.sh": SCRIPT.encode(), "given.txt": b"as given\n"},
        stdin=stdin.encode(),
        time_s=time_s,
        memory_mb=64,
        output_bytes=4096,
    )


@pytest.fixture(scope="module")
def jail() -> Iterator[JailSandbox]:
    try:
        sandbox = JailSandbox(JailConfig(pool=PoolConfig(enabled=False)))
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
    yield sandbox
    sandbox.close()


async def runs(jail: JailSandbox, *stdins: str) -> list[ExecResult]:
    session = jail.session(request())
    assert session is not None
    try:
        return [await session.run(request(stdin)) for stdin in stdins]
    finally:
        await session.aclose()


async def test_each_run_gets_its_own_stdin_and_output(jail: JailSandbox) -> None:
    results = await runs(jail, *(f"double\n{n}\n" for n in range(20)))
    assert [r.stdout for r in results] == [f"{2 * n}\n".encode() for n in range(20)]
    assert all(r.ok for r in results)


def assert_confined(result: ExecResult) -> None:
    """No capability in any set, no way to gain one, the seccomp filter, default signals."""
    assert result.ok, result
    status = dict(line.split(":", 1) for line in result.stdout.decode().splitlines())
    assert status["Uid"].split() == ["65534"] * 4
    caps = {name: int(value, 16) for name, value in status.items() if name.startswith("Cap")}
    assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert not any(caps.values()), caps
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
    # The shell handles or ignores nothing of its own before it runs grep;
    # grep is its child, so this is what the jail handed the program, as exec left it.
    signals = {name: int(status[name], 16) for name in ("SigIgn", "SigCgt", "SigBlk")}
    assert not any(signals.values()), signals


async def test_every_run_is_confined_as_a_jail_s_program(jail: JailSandbox) -> None:
    # The session's init empties the capability bounding set once and works out the
    # seccomp filter and its own non-default signals once; each run's program still
    # gets what a new jail's program gets.
    for result in await runs(jail, "confined", "double\n1\n", "confined"):
        if result.stdout != b"2\n":
            assert_confined(result)


async def test_signals_the_worker_ignores_are_at_their_default_in_every_run() -> None:
    """Ignored dispositions survive fork and exec: the worker's must never reach a program."""
    ignored = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT, signal.SIGALRM)
    saved = [signal.signal(sig, signal.SIG_IGN) for sig in ignored]
    sandbox = strict_sandbox(PoolConfig(enabled=False))
    try:  # its spawners start with the first runs, ignoring what this process ignores
        for result in await runs(sandbox, "confined", "confined"):
            assert_confined(result)
        assert_confined(await sandbox.execute(request("confined")))
    finally:
        sandbox.close()
        for sig, handler in zip(ignored, saved, strict=True):
            signal.signal(sig, handler)


async def test_a_run_sees_the_files_as_given_never_as_an_earlier_run_left_them(
    jail: JailSandbox,
) -> None:
    before, changed, after = await runs(jail, "look", "change", "look")
    assert before.stdout == after.stdout == b"as given\ngiven.txt\nprog.sh\n"
    assert changed.stdout == b"ok\n"


async def test_a_run_that_changed_then_restored_its_directories_leaves_no_trace(
    jail: JailSandbox,
) -> None:
    """Files created and removed again, times and modes set: the next run sees none of it.

    A file system the run changed is replaced by a new one, whose times are the time
    of the replacement (as a new jail's would be): they may be a second later than
    the first run's, never the meddled 2001 ones.
    """
    before, meddled, after = await runs(jail, "stat", "meddle", "stat")
    assert meddled.stdout == b"ok\n", meddled
    assert before.ok and after.ok, (before, after)

    def split(stdout: bytes) -> tuple[list[str], list[int]]:
        """What must be equal (names, modes, owners, listings) and the times."""
        lines = stdout.decode().splitlines()
        stats = [line.split() for line in lines[:3]]
        kept = [" ".join(fields[:4]) for fields in stats] + lines[3:]
        return kept, [int(t) for fields in stats for t in fields[4:]]

    (was, was_times), (now, now_times) = split(before.stdout), split(after.stdout)
    assert now == was, (before.stdout, after.stdout)
    assert len(now_times) == len(was_times) == 6
    assert all(b <= a <= b + 60 for b, a in zip(was_times, now_times, strict=True)), (
        was_times,
        now_times,
    )


async def test_every_limit_holds_per_run_and_the_next_run_is_judged_alone(
    jail: JailSandbox,
) -> None:
    spin, after_spin, spam, after_spam, hog, after_hog = await runs(
        jail, "spin", "double\n1", "spam", "double\n2", "hog", "double\n3"
    )
    assert (spin.timed_out_by, spin.cpu_ms >= 1000) == ("cpu", True)
    assert spam.output_exceeded and len(spam.stdout) == 4096
    assert hog.memory_exceeded
    for result, out in ((after_spin, b"2\n"), (after_spam, b"4\n"), (after_hog, b"6\n")):
        assert result.ok and result.stdout == out, result
        # Its own CPU time and memory, not what the run before it used.
        assert result.cpu_ms < 200 and result.peak_memory_kb < 32 << 10, result


async def test_the_time_limit_is_each_run_s_own(jail: JailSandbox) -> None:
    session = jail.session(request())
    assert session is not None
    try:
        short = await session.run(request("spin", time_s=0.2))
        default = await session.run(request("spin"))
    finally:
        await session.aclose()
    assert short.timed_out_by == default.timed_out_by == "cpu"
    assert 200 <= short.cpu_ms < 700 and default.cpu_ms >= 1000


async def test_a_session_runs_its_own_program_only(jail: JailSandbox) -> None:
    session = jail.session(request())
    assert session is not None
    try:
        with pytest.raises(ValueError, match="its own program"):
            await session.run(replace(request(), argv=("/bin/true",)))
    finally:
        await session.aclose()


def test_no_session_where_a_run_would_not_be_better_served() -> None:
    sandbox = JailSandbox(JailConfig(strict=False, disabled=frozenset({"mounts"})))
    try:
        assert sandbox.session(request()) is None  # no private root to restore per run
    finally:
        sandbox.close()


@dataclass
class OneJailPerTest:
    """The jail without sessions: every test its own execution."""

    inner: JailSandbox

    @property
    def degraded(self) -> tuple[str, ...]:
        return self.inner.degraded

    async def execute(self, request: ExecRequest) -> ExecResult:
        return await self.inner.execute(request)

    async def aclose(self) -> None:
        """The wrapped jail belongs to its fixture."""


@dataclass
class CountingSessions(OneJailPerTest):
    """The jail with sessions, counting them."""

    opened: int = 0

    def session(self, request: ExecRequest) -> ProgramSession | None:
        self.opened += 1
        return self.inner.session(request)


_C_SUITE = """
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    long n;
    if (scanf("%ld", &n) != 1) return 2;
    if (n == 3) return 7;                 /* runtime error */
    if (n == 5) for (;;) {}               /* time limit */
    if (n == 6) { FILE *f = fopen("seen", "a"); fputs("x", f); fclose(f); }
    if (n == 7) { FILE *f = fopen("seen", "r"); if (f) return 9; }  /* only if 6's file stayed */
    printf("%ld\\n", n == 4 ? n : 2 * n); /* 4: wrong answer */
    return 0;
}
"""


async def test_a_suite_is_judged_the_same_through_a_session_as_one_jail_per_test(
    jail: JailSandbox, tmp_path: Path
) -> None:
    assert isinstance(CountingSessions(jail), SessionSandbox)
    assert not isinstance(OneJailPerTest(jail), SessionSandbox)
    inputs = [str(n) for n in range(1, 9)]
    suite = IoSuite(inputs=inputs, outputs=[str(2 * n) for n in range(1, 9)])
    completion = Completion(
        sample_id="s",
        language="c",
        code=_C_SUITE,
        tests=suite,
        limits=Limits(time_s=0.5, total_time_s=20.0, memory_mb=64),
    )
    config = ExecutorConfig(compile_cache_dir=tmp_path)
    counting = CountingSessions(jail)
    through_session = await Executor(config, counting).run(completion)
    per_test = await Executor(config, OneJailPerTest(jail)).run(completion)
    verdicts = [t.verdict for t in through_session.tests]
    assert verdicts == [t.verdict for t in per_test.tests]
    ac, wa, re, tle = (
        Verdict.ACCEPTED,
        Verdict.WRONG_ANSWER,
        Verdict.RUNTIME_ERROR,
        Verdict.TIME_LIMIT,
    )
    assert verdicts == [ac, ac, re, wa, tle, ac, ac, ac]
    assert counting.opened == 1
