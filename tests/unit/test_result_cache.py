"""The result cache without a broker: the LRU's budget, what may be shared, coalescing."""

from __future__ import annotations

import asyncio

import pytest

from sandbox_workers.cache_policy import cacheable, to_cached, to_reward
from sandbox_workers.lru import ByteLRU
from sandbox_workers.result_cache import ClusterResultCache, LocalResultCache
from schemas import (
    CachedResult,
    Completion,
    KafkaSettings,
    RewardEvent,
    TestOutcome,
    Verdict,
    encode,
)

FP = "sha256:" + "0" * 64


def event(verdict: Verdict = Verdict.ACCEPTED, **fields: object) -> RewardEvent:
    base: dict[str, object] = {
        "sample_id": "s-original",
        "batch_id": "b-original",
        "group_id": "g-original",
        "policy_version": 3,
        "score": 1.0 if verdict is Verdict.ACCEPTED else 0.0,
        "verdict": verdict,
        "passed": 2 if verdict is Verdict.ACCEPTED else 0,
        "total": 2,
        "tests": [TestOutcome(index=0, verdict=verdict), TestOutcome(index=1, verdict=verdict)],
        "stdout_tail": "5\n",
        "exec_ms": 123.0,
        "worker_id": "w-original",
    }
    base.update(fields)
    return RewardEvent(**base)  # type: ignore[arg-type]


def completion(sample_id: str = "s-new") -> Completion:
    return Completion(
        sample_id=sample_id, batch_id="b-new", group_id="g-new", policy_version=7, code="x"
    )


def unstarted_cache(max_pending_puts: int = 1024) -> ClusterResultCache:
    # Nothing connects before start(): coalescing and local lookups need no broker.
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    return ClusterResultCache(kafka, LocalResultCache(1 << 20), max_pending_puts=max_pending_puts)


# -- the LRU ----------------------------------------------------------------------------


def test_lru_evicts_least_recently_used_within_budget() -> None:
    lru: ByteLRU[str, int] = ByteLRU(max_bytes=30)
    for key in "abc":
        assert lru.put(key, ord(key), 10)
    assert lru.get("a") == ord("a")  # "b" is now the least recently used
    assert lru.put("d", 4, 10)
    assert "b" not in lru
    assert set("acd") <= {k for k in "abcd" if k in lru}
    assert (lru.size_bytes, len(lru), lru.evictions) == (30, 3, 1)


def test_lru_makes_room_for_a_big_entry_and_refuses_a_huge_one() -> None:
    lru: ByteLRU[str, str] = ByteLRU(max_bytes=30)
    for key in "abc":
        lru.put(key, key, 10)
    assert lru.put("big", "big", 25)
    assert len(lru) == 1
    assert lru.evictions == 3
    assert not lru.put("huge", "huge", 31)
    assert lru.rejected == 1
    assert "big" in lru


def test_lru_replacing_a_key_accounts_its_new_size() -> None:
    lru: ByteLRU[str, str] = ByteLRU(max_bytes=100)
    lru.put("a", "x", 40)
    lru.put("a", "y", 10)
    assert (lru.size_bytes, len(lru), lru.get("a")) == (10, 1, "y")
    lru.discard("a")
    lru.discard("a")
    assert (lru.size_bytes, len(lru)) == (0, 0)


def test_lru_counts_hits_and_misses() -> None:
    lru: ByteLRU[str, int] = ByteLRU(max_bytes=10)
    lru.put("a", 1, 1)
    assert lru.get("a") == 1
    assert lru.get("b") is None
    assert (lru.hits, lru.misses) == (1, 1)


def test_lru_rejects_a_non_positive_budget() -> None:
    with pytest.raises(ValueError, match="positive"):
        ByteLRU[str, int](0)


def test_local_cache_sizes_entries_by_their_encoding() -> None:
    entry = to_cached(FP, event())
    local = LocalResultCache(max_bytes=10_000)
    assert local.put_result(entry)
    assert local.size_bytes == len(encode(entry))
    assert local.get(FP) == entry


# -- what may be shared -------------------------------------------------------------


@pytest.mark.parametrize(
    "verdict",
    [Verdict.ACCEPTED, Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR, Verdict.COMPILE_ERROR],
)
def test_program_outcomes_are_cacheable(verdict: Verdict) -> None:
    assert cacheable(event(verdict))


@pytest.mark.parametrize(
    ("why", "refused"),
    [
        ("infrastructure fault", event(Verdict.SANDBOX_ERROR)),
        ("time limit, maybe under overload", event(Verdict.TIME_LIMIT)),
        (
            "one test timed out",
            event(
                Verdict.WRONG_ANSWER,
                score=0.5,
                tests=[
                    TestOutcome(index=0, verdict=Verdict.ACCEPTED),
                    TestOutcome(index=1, verdict=Verdict.TIME_LIMIT),
                ],
            ),
        ),
        (
            "one test hit a sandbox fault",
            event(tests=[TestOutcome(index=0, verdict=Verdict.SANDBOX_ERROR)]),
        ),
        ("degraded sandbox", event(degraded=["seccomp"])),
        ("already a cache hit", event(cache_hit=True)),
    ],
)
def test_untrustworthy_results_are_not_cacheable(why: str, refused: RewardEvent) -> None:
    assert not cacheable(refused), why


def test_to_reward_takes_ids_from_the_new_completion() -> None:
    original = event(Verdict.WRONG_ANSWER, score=0.5, passed=1, message="1 of 2")
    cached = to_cached(FP, original, worker_id="w-cache")
    reward = to_reward(cached, completion("s-new"))
    assert (reward.sample_id, reward.batch_id, reward.group_id, reward.policy_version) == (
        "s-new",
        "b-new",
        "g-new",
        7,
    )
    assert (reward.score, reward.verdict, reward.passed, reward.total) == (
        0.5,
        Verdict.WRONG_ANSWER,
        1,
        2,
    )
    assert (reward.tests, reward.stdout_tail, reward.message) == (
        original.tests,
        "5\n",
        "1 of 2",
    )
    assert reward.cache_hit
    assert reward.exec_ms == 0.0
    assert cached.exec_ms == 123.0
    assert cached.worker_id == "w-original"  # who judged it, not who cached it


# -- coalescing -----------------------------------------------------------------------


class Gate:
    """A compute function that blocks until released and counts its calls."""

    def __init__(self, result: RewardEvent | Exception) -> None:
        self.result = result
        self.calls = 0
        self.open = asyncio.Event()

    async def __call__(self) -> RewardEvent:
        self.calls += 1
        await self.open.wait()
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


async def _yield_to_all() -> None:
    """Let every ready task run up to its next await (a yield, not a timed wait)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_identical_fingerprints_in_flight_execute_once() -> None:
    cache = unstarted_cache()
    gate = Gate(event())
    calls = [
        asyncio.create_task(cache.get_or_compute(FP, completion(f"s{i}"), gate)) for i in range(10)
    ]
    await _yield_to_all()
    assert gate.calls == 1
    gate.open.set()
    results = await asyncio.gather(*calls)
    assert gate.calls == 1
    assert [hit for _, hit in results] == [False] + [True] * 9
    assert results[0][0].sample_id == "s-original"  # the leader's own reward, untouched
    assert [r.sample_id for r, _ in results[1:]] == [f"s{i}" for i in range(1, 10)]
    assert all(r.cache_hit for r, _ in results[1:])
    assert cache.stats.coalesced == 9
    # Afterwards it is a plain local hit.
    again, hit = await cache.get_or_compute(FP, completion("s-later"), gate)
    assert hit
    assert again.sample_id == "s-later"
    assert gate.calls == 1
    assert await cache.get(FP) is not None


async def test_unshareable_results_are_computed_by_each_caller() -> None:
    cache = unstarted_cache()
    gate = Gate(event(Verdict.TIME_LIMIT))
    calls = [
        asyncio.create_task(cache.get_or_compute(FP, completion(f"s{i}"), gate)) for i in range(4)
    ]
    await _yield_to_all()
    gate.open.set()
    results = await asyncio.gather(*calls)
    assert gate.calls == 4
    assert not any(hit for _, hit in results)
    assert await cache.get(FP) is None
    assert cache.stats.uncacheable == 4


async def test_a_failing_leader_leaves_waiters_to_compute() -> None:
    cache = unstarted_cache()
    failing = Gate(RuntimeError("sandbox crashed"))
    leader = asyncio.create_task(cache.get_or_compute(FP, completion("s0"), failing))
    await _yield_to_all()
    working = Gate(event())
    waiter = asyncio.create_task(cache.get_or_compute(FP, completion("s1"), working))
    await _yield_to_all()
    assert working.calls == 0
    failing.open.set()
    with pytest.raises(RuntimeError, match="sandbox crashed"):
        await leader
    await _yield_to_all()
    working.open.set()
    result, hit = await waiter
    assert (working.calls, hit, result.verdict) == (1, False, Verdict.ACCEPTED)


async def test_a_cancelled_waiter_does_not_cancel_the_execution() -> None:
    cache = unstarted_cache()
    gate = Gate(event())
    leader = asyncio.create_task(cache.get_or_compute(FP, completion("s0"), gate))
    waiter = asyncio.create_task(cache.get_or_compute(FP, completion("s1"), gate))
    await _yield_to_all()
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    gate.open.set()
    result, hit = await leader
    assert (hit, result.sample_id, gate.calls) == (False, "s-original", 1)
    assert await cache.get(FP) is not None


async def test_put_refuses_uncacheable_and_counts_a_full_outbound_queue() -> None:
    cache = unstarted_cache(max_pending_puts=1)
    assert not await cache.put(FP, event(Verdict.SANDBOX_ERROR))
    assert await cache.put(FP, event())
    assert await cache.put("sha256:" + "1" * 64, event())  # stored locally, not published
    assert cache.stats.dropped_puts == 1
    assert len(cache.local) == 2
    got = await cache.get(FP)
    assert isinstance(got, CachedResult)
    assert got.fingerprint == FP
