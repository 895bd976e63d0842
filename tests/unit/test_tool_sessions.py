"""The worker's tool sessions without Kafka: the table's bounds, the replay protocol, the calls.

Sessions are :class:`tests.support.tool_sessions.DictSession` (exec in a dict); the
clock is the test's, so idle TTL and lifetime are exact.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sandbox_workers.tools import SessionLimits
from sandbox_workers.tools.calls import ToolCalls
from sandbox_workers.tools.replay import decide
from sandbox_workers.tools.sessions import Held, SessionTable
from schemas import Completion, RewardEvent, TestSuite, ToolCall, ToolCell, ToolLimits, Verdict
from tests.support.poll import until
from tests.support.tool_sessions import DictSession, DictSessions

REPLY = "rewardbus.replies.test"


def _call(
    seq: int,
    code: str = "",
    *,
    session: str = "s1",
    history: list[ToolCell] | None = None,
    **fields: object,
) -> ToolCall:
    return ToolCall(
        call_id=f"{session}-{seq}",
        session_id=session,
        seq=seq,
        reply_topic=REPLY,
        code=code,
        history=history,
        **fields,  # type: ignore[arg-type]
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _held(session_id: str, limits: ToolLimits | None = None, partition: int = 0) -> Held:
    return Held(session_id, DictSession(SessionLimits()), limits or ToolLimits(), partition)


# -- the replay decision ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "held", "history", "action"),
    [
        (3, 2, None, "run"),
        (2, 2, None, "resend"),
        (1, 2, None, "rejected"),
        (1, None, None, "start"),
        (1, None, [], "start"),
        (3, None, None, "replay_needed"),
        (5, 2, None, "replay_needed"),  # a gap: the held session is not the caller's
        (3, None, [ToolCell(seq=1, code="a = 1")], "rebuild"),
        (5, 2, [ToolCell(seq=1, code="a = 1")], "rebuild"),
        (2, None, [], "rebuild"),  # the first cell ended its session: nothing to replay
    ],
)
def test_decide_follows_the_replay_protocol(
    seq: int, held: int | None, history: list[ToolCell] | None, action: str
) -> None:
    assert decide(_call(seq, history=history), held).action == action


# -- the table -------------------------------------------------------------------------------


async def test_the_least_recently_used_idle_session_is_evicted_and_remembered() -> None:
    gone: Counter[str] = Counter()
    table = SessionTable(2, on_gone=lambda reason: gone.update([reason]))
    a, b, c = _held("a"), _held("b"), _held("c")
    table.add(a)
    table.add(b)
    with table.using(a):  # a is used after b: b is the least recently used
        pass
    table.add(c)
    assert sorted(h.session_id for h in table.sessions()) == ["a", "c"]
    assert table.gone_reason("b") == "evicted"
    assert table.gone_reason("never-seen") == "not_held"
    assert gone == {"evicted": 1}
    await until(lambda: b.session.closed, "the evicted session closed")  # type: ignore[attr-defined]
    await table.aclose()
    assert a.session.closed and c.session.closed  # type: ignore[attr-defined]


async def test_a_session_running_a_cell_is_not_evicted() -> None:
    table = SessionTable(1)
    a = _held("a")
    table.add(a)
    with table.using(a):
        table.add(_held("b"))
        assert "a" in table and len(table) == 2  # over the bound while a runs
    await table.aclose()


async def test_idle_ttl_and_lifetime_expire_sessions_on_the_loop() -> None:
    clock = _Clock()
    table = SessionTable(10, clock=clock)
    idle = _held("idle", ToolLimits(idle_ttl_s=5, lifetime_s=100))
    old = _held("old", ToolLimits(idle_ttl_s=50, lifetime_s=8))
    for held in (idle, old):
        held.created_at = held.last_used = clock.now
        table.add(held)
    clock.now += 6
    assert table.expire() == 1
    assert table.gone_reason("idle") == "expired" and "old" in table
    clock.now += 3
    assert table.expire() == 1
    assert table.gone_reason("old") == "expired"
    await table.aclose()


async def test_the_timer_fires_at_the_earliest_deadline() -> None:
    table = SessionTable(10)
    table.add(_held("soon", ToolLimits(idle_ttl_s=0.05)))
    table.add(_held("later", ToolLimits(idle_ttl_s=60)))
    await until(lambda: "soon" not in table, "the short-lived session expired by its timer")
    assert table.gone_reason("soon") == "expired" and "later" in table
    await table.aclose()


async def test_sessions_of_partitions_that_moved_away_are_closed() -> None:
    table = SessionTable(10)
    table.add(_held("p0", partition=0))
    table.add(_held("p1", partition=1))
    assert table.keep_partitions([1]) == 1
    assert "p0" not in table and "p1" in table
    await table.aclose()


# -- the calls -------------------------------------------------------------------------------


class _Programs:
    """A stateless runner: echoes the program as its stdout, or fails as asked."""

    languages = {"python": "3", "javascript": "22"}  # noqa: RUF012

    def __init__(self) -> None:
        self.runs: list[Completion] = []

    async def run(
        self,
        completion: Completion,
        suite: TestSuite | None = None,
        *,
        output_tail_bytes: int | None = None,
    ) -> RewardEvent:
        self.runs.append(completion)
        verdict = (
            Verdict.RUNTIME_ERROR if "throw" in (completion.code or "") else Verdict.WRONG_ANSWER
        )
        return RewardEvent(
            sample_id=completion.sample_id,
            verdict=verdict,
            stdout_tail=completion.code or "",
            stderr_tail="Error: boom" if verdict is Verdict.RUNTIME_ERROR else "",
            exec_ms=3.0,
        )


def _calls(max_sessions: int = 10) -> tuple[ToolCalls, DictSessions, _Programs]:
    factory, programs = DictSessions(), _Programs()
    calls = ToolCalls(
        table=SessionTable(max_sessions),
        factory=factory,
        runner=programs,
        worker_id="w1",
        concurrency=2,
    )
    return calls, factory, programs


async def _run(calls: ToolCalls, call: ToolCall) -> tuple[str, str, object]:
    outcome = await calls.run(call, partition=0)
    return outcome.result.status, outcome.result.stdout, outcome.result


async def test_a_trajectory_of_dependent_cells_shares_one_session() -> None:
    calls, factory, _ = _calls()
    assert (await _run(calls, _call(1, "x = 20")))[:2] == ("ok", "")
    assert (await _run(calls, _call(2, "def f(y): return x + y")))[:2] == ("ok", "")
    status, stdout, result = await _run(calls, _call(3, "print(f(22))"))
    assert (status, stdout) == ("ok", "42\n")
    assert len(factory.started) == 1
    assert result.worker_id == "w1" and not result.rebuilt  # type: ignore[attr-defined]
    await calls.table.aclose()


async def test_a_raising_cell_is_an_error_and_the_session_lives_on() -> None:
    calls, _, _ = _calls()
    await _run(calls, _call(1, "x = 1"))
    status, _, result = await _run(calls, _call(2, "1 / 0"))
    assert status == "error" and "ZeroDivisionError" in result.stderr  # type: ignore[attr-defined]
    assert (await _run(calls, _call(3, "print(x)")))[:2] == ("ok", "1\n")
    await calls.table.aclose()


async def test_a_redelivered_call_gets_its_kept_result_and_a_stale_one_is_rejected() -> None:
    calls, factory, _ = _calls()
    await _run(calls, _call(1, "n = 0"))
    first = await _run(calls, _call(2, "n += 1; print(n)"))
    again = await _run(calls, _call(2, "n += 1; print(n)"))
    assert first[1] == again[1] == "1\n"
    assert factory.started[0].cells == ["n = 0", "n += 1; print(n)"]  # ran once
    status, _, result = await _run(calls, _call(1, "n = 0"))
    assert status == "rejected" and "stale" in result.message  # type: ignore[attr-defined]
    await calls.table.aclose()


@pytest.mark.parametrize(
    ("lose", "reason"),
    [("evict", "evicted"), ("expire", "expired"), ("end", "ended"), ("forget", "not_held")],
)
async def test_a_session_not_held_asks_for_its_history_then_is_rebuilt(
    lose: str, reason: str
) -> None:
    calls, factory, _ = _calls(max_sessions=1)
    await _run(calls, _call(1, "x = 20"))
    await _run(calls, _call(2, "y = 22"))
    if lose == "evict":
        await _run(calls, _call(1, "z = 0", session="other"))
    elif lose == "expire":
        calls.table.remove("s1", "expired")
    elif lose == "end":
        assert (await _run(calls, _call(3, "burn()")))[0] == "time_limit"
    else:
        calls.table.forget("s1")
    seq = 4 if lose == "end" else 3
    status, _, asked = await _run(calls, _call(seq, "print(x + y)"))
    assert status == "replay_needed" and asked.rebuild_reason == reason  # type: ignore[attr-defined]
    history = [ToolCell(seq=1, code="x = 20"), ToolCell(seq=2, code="y = 22")]
    status, stdout, result = await _run(calls, _call(seq, "print(x + y)", history=history))
    assert (status, stdout) == ("ok", "42\n")
    assert result.rebuilt and result.rebuild_reason == reason  # type: ignore[attr-defined]
    assert result.replayed == 2 and result.replay_ms >= 0  # type: ignore[attr-defined]
    assert factory.started[-1].cells == ["x = 20", "y = 22", "print(x + y)"]
    await calls.table.aclose()


async def test_a_history_cell_that_ends_the_session_is_session_lost() -> None:
    calls, _, _ = _calls()
    history = [ToolCell(seq=1, code="raise SystemExit")]
    status, _, result = await _run(calls, _call(2, "print(1)", history=history))
    assert status == "session_lost" and "seq 1" in result.message  # type: ignore[attr-defined]
    assert result.rebuilt  # type: ignore[attr-defined]
    assert "s1" not in calls.table
    await calls.table.aclose()


async def test_a_sandbox_fault_is_a_sandbox_error_and_drops_the_session() -> None:
    calls, factory, _ = _calls()
    await _run(calls, _call(1, "x = 1"))
    factory.started[0].fault_on = "boom"
    assert (await _run(calls, _call(2, "boom")))[0] == "sandbox_error"
    assert "s1" not in calls.table
    factory.fail_starts = 1
    assert (await _run(calls, _call(1, "x = 1", session="s2")))[0] == "sandbox_error"
    await calls.table.aclose()


async def test_end_session_closes_it_and_forgets_why() -> None:
    calls, factory, _ = _calls()
    await _run(calls, _call(1, "x = 1"))
    assert (await _run(calls, _call(2, end_session=True)))[0] == "ok"
    await until(lambda: factory.started[0].closed, "the ended session closed")
    assert calls.table.gone_reason("s1") == "not_held"
    await calls.table.aclose()


async def test_stateless_calls_run_as_programs_and_unknown_languages_are_rejected() -> None:
    calls, factory, programs = _calls()
    status, stdout, _ = await _run(calls, _call(1, "console.log(1)", language="javascript"))
    assert (status, stdout) == ("ok", "console.log(1)")
    status, _, result = await _run(calls, _call(1, "throw 1", language="javascript"))
    assert status == "error" and "boom" in result.stderr  # type: ignore[attr-defined]
    assert (await _run(calls, _call(1, "print(1)", stateless=True)))[0] == "ok"
    status, _, result = await _run(calls, _call(1, "x", language="cobol"))
    assert status == "rejected" and "cobol" in result.message  # type: ignore[attr-defined]
    assert not factory.started and len(programs.runs) == 3
    assert programs.runs[0].limits.time_s == ToolLimits().time_s
    await calls.table.aclose()


async def test_output_past_the_cap_is_cut() -> None:
    calls, _, _ = _calls()
    call = _call(1, "print('x' * 5000)", limits=ToolLimits(output_kb=1))
    status, stdout, result = await _run(calls, call)
    assert status == "output_limit" and len(stdout) == 1024 and result.truncated  # type: ignore[attr-defined]
    await calls.table.aclose()


async def test_calls_of_different_sessions_run_concurrently() -> None:
    calls, _, _ = _calls()
    results = await asyncio.gather(
        *(_run(calls, _call(1, f"print({n})", session=f"s{n}")) for n in range(5))
    )
    assert [r[1] for r in results] == [f"{n}\n" for n in range(5)]
    assert len(calls.table) == 5
    await calls.table.aclose()
