"""Fault injection on the real broker: the pipeline rides through, losing and doubling nothing.

- The broker is stopped mid-run for ~10 s and started again on the same data dir.
- A worker is killed -9: its partitions move to the survivor within a bound (measured).
- Every worker is restarted in turn under load with static membership: no rebalance.
- The aggregator is killed -9 while batches are half scored, with workers still judging.

Each test checks the scored batches: every published sample is in exactly one batch,
once, with its reward; nothing is missing. The measured times are printed (``-s``)
and written down in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from consumers import ScoredBatches
from producers import RolloutProducer
from rewardbus.runtime.broker import BrokerConfig, EmbeddedBroker
from rewardbus.runtime.local import RewardWatcher
from rewardbus.runtime.ports import free_ports
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers.service import WorkerConfig
from schemas import (
    BatchManifest,
    Completion,
    IoSuite,
    KafkaSettings,
    ScoredBatch,
    Topics,
)
from tests.support.broker_state import admin_client, group_state
from tests.support.stages import aggregator, running, worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BATCH = 5
# Slow enough that a backlog outlasts the fault, fast enough for a 2-core machine.
SLOW_ADD = "import time\ntime.sleep({pause})\na, b = map(int, input().split())\nprint(a + b)\n"
SUITE = IoSuite(inputs=["2 3\n"], outputs=["5\n"])


# -- workload and checks ---------------------------------------------------------------


def _batch(batch_id: str, *, pause: float = 0.2) -> tuple[BatchManifest, list[Completion]]:
    work = [
        Completion(
            sample_id=f"{batch_id}-s{i}",
            batch_id=batch_id,
            group_id=batch_id,
            # Distinct code per sample: the result cache must not answer for the sandbox.
            code=f"# {batch_id} {i}\n" + SLOW_ADD.format(pause=pause),
            tests=SUITE,
        )
        for i in range(BATCH)
    ]
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in work],
        group_ids=[c.group_id for c in work],
        group_size=BATCH,
        deadline=time.time() + 600,
    )
    return manifest, work


async def _publish(kafka: KafkaSettings, batches: list[tuple[BatchManifest, list[Completion]]],
                   *, every_s: float = 0.0) -> None:  # fmt: skip
    async with RolloutProducer(kafka) as producer:
        for manifest, work in batches:
            await producer.publish_manifest(manifest)
            await producer.publish_many(work)
            if every_s:
                await asyncio.sleep(every_s)  # a trainer's pace, not a wait for an event


async def _scored(kafka: KafkaSettings, batch_ids: set[str], timeout_s: float) -> list[ScoredBatch]:
    """Every scored record of the topic (re-emissions too) once all ``batch_ids`` are in."""
    found: list[ScoredBatch] = []
    async with ScoredBatches(kafka) as learner, asyncio.timeout(timeout_s):
        seen: set[str] = set()
        while not batch_ids <= seen:
            batch = await learner.next()
            seen.add(batch.batch_id)
            found.append(batch)
    return found


def _assert_each_sample_once(
    scored: list[ScoredBatch], batches: list[tuple[BatchManifest, list[Completion]]]
) -> None:
    """Zero lost, zero doubled: each batch whole and in manifest order, each sample in one."""
    by_id = {b.batch_id: b for b in scored}
    assert set(by_id) == {m.batch_id for m, _ in batches}
    samples = [s.sample_id for b in by_id.values() for s in b.samples]
    assert len(samples) == len(set(samples)) == BATCH * len(batches)
    for manifest, _ in batches:
        batch = by_id[manifest.batch_id]
        assert batch.complete and batch.missing == [], manifest.batch_id
        assert [s.sample_id for s in batch.samples] == manifest.sample_ids
        assert all(s.score == 1.0 for s in batch.samples), [s.verdict for s in batch.samples]


def _longest_gap_s(arrivals: list[float], after: float) -> float:
    """The longest time without a new reward that began at or after ``after``."""
    times = sorted(arrivals)
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= after]
    return max(gaps, default=0.0)


# -- components as processes -----------------------------------------------------------------


@dataclass
class _Proc:
    """A worker or aggregator process started from the CLI, its stderr in a file."""

    argv: list[str]
    log: Path
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=asyncio.subprocess.PIPE, stderr=log
            )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=90)
        assert b"ready" in line, self.log.read_text(errors="replace")[-3000:]

    async def stop(self, signum: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signum)
        return await asyncio.wait_for(self.proc.wait(), timeout=60)

    def assignments(self) -> int:
        """How often this process's worker was handed partitions (one per rebalance)."""
        text = self.log.read_text(errors="replace")
        return sum(
            1 for line in text.splitlines() if "sandbox_workers.worker_loop: assigned" in line
        )


def _cli_worker(kafka: KafkaSettings, index: int, logs: Path, *, static: bool) -> _Proc:
    argv = [
        sys.executable, "-m", "rewardbus", "worker",
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--topic-prefix", kafka.topics.prefix,
        "--group-id", f"{kafka.topics.prefix}workers",
        "--worker-id", f"w{index}",
        "--result-cache-mb", "0",
    ]  # fmt: skip
    if static:
        argv += ["--instance-id", f"w{index}"]
    return _Proc(argv, logs / f"w{index}.log")


@contextlib.asynccontextmanager
async def _processes(procs: list[_Proc]) -> AsyncIterator[list[_Proc]]:
    try:
        await asyncio.gather(*(p.start() for p in procs))
        yield procs
    finally:
        for p in procs:
            if p.proc is not None and p.proc.returncode is None:
                await p.stop(signal.SIGKILL)


@dataclass
class _GroupWatch:
    """Samples a consumer group's assignment every 100 ms: who serves which partition."""

    kafka: KafkaSettings
    group_id: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, members, parts)

    async def run(self, stop: asyncio.Event) -> None:
        async with admin_client(self.kafka) as admin:
            while not stop.is_set():
                group = await group_state(admin, self.group_id)
                parts = group.partitions if group.state == "Stable" else 0
                self.samples.append((time.monotonic(), len(group.owned), parts))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.1)

    def served_again_after(self, t0: float, members: int, partitions: int) -> float:
        """Seconds from ``t0`` until ``members`` members served every partition, stably."""
        for t, m, p in self.samples:
            if t >= t0 and m == members and p == partitions:
                return t - t0
        raise AssertionError(f"the group never settled on {members} members: {self.samples[-5:]}")


# -- 1. the broker stops for 10 s ------------------------------------------------------------


@pytest.mark.timeout(420)
async def test_broker_stopped_for_10_s_and_restarted_on_its_data_dir_loses_nothing(
    tmp_path: Path,
) -> None:
    # Fixed ports: clients keep their bootstrap address across the restart, and the
    # KRaft voter (the controller's endpoint is stored in the metadata log) is unchanged.
    port, controller = free_ports("127.0.0.1", 2)
    broker = EmbeddedBroker(
        BrokerConfig(data_dir=tmp_path / "kafka", port=port, controller_port=controller)
    )
    await asyncio.to_thread(broker.start)
    try:
        kafka = KafkaSettings(
            bootstrap_servers=broker.bootstrap_servers, topics=Topics(prefix="outage."),
            client_id="rb-fault",
        )  # fmt: skip
        await ensure_topics(kafka, partitions=4)
        batches = [_batch(f"o{i:02d}") for i in range(24)]
        async with (
            running(worker(kafka, "o-w0")),
            running(worker(kafka, "o-w1")),
            running(aggregator(kafka)),
            RewardWatcher(kafka) as watcher,
        ):
            await await_group_members(kafka, f"{kafka.topics.prefix}workers", 2)
            publishing = asyncio.create_task(_publish(kafka, batches, every_s=0.5))
            await watcher.wait_for(15, timeout_s=120)
            stopped_at = time.monotonic()
            await asyncio.to_thread(broker.stop)
            await asyncio.sleep(10)  # the outage itself: the fault lasts this long
            await asyncio.to_thread(broker.start)
            restarted_after = time.monotonic() - stopped_at
            await asyncio.wait_for(publishing, timeout=180)
            await watcher.wait_for(BATCH * len(batches), timeout_s=240)
            outage = _longest_gap_s(list(watcher.arrived_at.values()), stopped_at)
            scored = await _scored(kafka, {m.batch_id for m, _ in batches}, timeout_s=120)
        _assert_each_sample_once(scored, batches)
        print(
            f"\nbroker down {restarted_after:.1f} s (10 s stopped + start-up); "
            f"no reward for {outage:.1f} s as seen by the pipeline "
            f"(rewards again {outage - restarted_after:+.1f} s after the broker was back)"
        )
        # The pipeline is back within a bound of the broker being back.
        assert outage < restarted_after + 20
    finally:
        await asyncio.to_thread(broker.stop)


# -- 2. a worker is killed -9 ------------------------------------------------------------------


@pytest.mark.timeout(300)
async def test_worker_kill_9_failover_is_bounded_and_the_batches_complete(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=4)
    batches = [_batch(f"k{i:02d}", pause=0.1) for i in range(16)]
    group = f"{kafka.topics.prefix}workers"
    watch = _GroupWatch(kafka, group)
    done = asyncio.Event()
    procs = [_cli_worker(kafka, i, tmp_path, static=False) for i in range(2)]
    async with (
        _processes(procs),
        running(aggregator(kafka)),
        RewardWatcher(kafka) as watcher,
    ):
        await await_group_members(kafka, group, 2)
        watching = asyncio.create_task(watch.run(done))
        await _publish(kafka, batches)
        await watcher.wait_for(10, timeout_s=120)
        killed_at = time.monotonic()
        assert await procs[0].stop(signal.SIGKILL) == -signal.SIGKILL
        await watcher.wait_for(BATCH * len(batches), timeout_s=180)
        done.set()
        await watching
        scored = await _scored(kafka, {m.batch_id for m, _ in batches}, timeout_s=120)
    _assert_each_sample_once(scored, batches)
    failover = watch.served_again_after(killed_at, members=1, partitions=4)
    config = WorkerConfig()
    print(
        f"\nkill -9 -> partitions served again after {failover:.1f} s "
        f"(session timeout {config.session_timeout_ms / 1000:g} s)"
    )
    # The group notices a dead member after the session timeout, then rebalances at once.
    assert failover <= config.session_timeout_ms / 1000 + 4


# -- 3. a rolling restart of static members ---------------------------------------------------


@pytest.mark.timeout(420)
async def test_rolling_restart_of_static_workers_under_load_needs_no_rebalance(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=4)
    batches = [_batch(f"r{i:02d}", pause=0.1) for i in range(24)]
    group = f"{kafka.topics.prefix}workers"
    procs = [_cli_worker(kafka, i, tmp_path, static=True) for i in range(2)]
    async with (
        _processes(procs),
        running(aggregator(kafka)),
        RewardWatcher(kafka) as watcher,
    ):
        await await_group_members(kafka, group, 2)
        await _publish(kafka, batches)
        await watcher.wait_for(10, timeout_s=120)
        handed = [p.assignments() for p in procs]
        gaps: list[float] = []
        for index, proc in enumerate(procs):
            before = len(watcher.rewards)
            assert await proc.stop(signal.SIGTERM) == 0  # drains, commits, keeps its place
            stopped_at = time.monotonic()
            await proc.start()  # same group.instance.id: its partitions come back as they were
            gaps.append(time.monotonic() - stopped_at)
            assert len(watcher.rewards) < BATCH * len(batches), "the load ended too early"
            await watcher.wait_for(before + 4, timeout_s=120)
            print(f"\nworker {index} restarted in {gaps[-1]:.1f} s")
        await watcher.wait_for(BATCH * len(batches), timeout_s=240)
        scored = await _scored(kafka, {m.batch_id for m, _ in batches}, timeout_s=120)
    _assert_each_sample_once(scored, batches)
    # No rebalance: each restarted worker was handed its partitions once, at its start,
    # and the worker that kept running was never handed any again.
    extra = [p.assignments() - n for p, n in zip(procs, handed, strict=True)]
    assert extra == [1, 1], f"rebalances during the rolling restart: {extra}"


# -- 4. the aggregator is killed -9 while workers judge ---------------------------------------

_AGGREGATOR = """
import asyncio, sys
from consumers import AggregatorConfig, run_aggregator
from schemas import KafkaSettings, Topics

async def main() -> None:
    kafka = KafkaSettings(bootstrap_servers=sys.argv[1], topics=Topics(prefix=sys.argv[2]))
    ready = asyncio.Event()
    config = AggregatorConfig(group_id=sys.argv[2] + "agg", group_instance_id="agg-0")
    serving = run_aggregator(kafka, config, shutdown=asyncio.Future(), ready=ready)
    task = asyncio.create_task(serving)
    await ready.wait()
    print("ready", flush=True)
    await task

asyncio.run(main())
"""


@pytest.mark.timeout(300)
async def test_aggregator_kill_9_mid_batch_with_workers_running_completes_each_batch(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=4)
    # Few, big batches: the kill lands while each of them is partly scored.
    batches = [_batch(f"a{i}", pause=0.1) for i in range(8)]
    agg = _Proc(
        [sys.executable, "-c", _AGGREGATOR, kafka.bootstrap_servers, kafka.topics.prefix],
        tmp_path / "agg.log",
    )
    async with (
        running(worker(kafka, "a-w0")),
        running(worker(kafka, "a-w1")),
        _processes([agg]),
        RewardWatcher(kafka) as watcher,
    ):
        await _publish(kafka, batches)
        await watcher.wait_for(12, timeout_s=120)
        assert await agg.stop(signal.SIGKILL) == -signal.SIGKILL
        per_batch = Counter(e.batch_id for e in watcher.rewards.values())
        partial = [b for b, n in per_batch.items() if n < BATCH]
        assert partial, f"the kill came between batches: {per_batch}"
        await watcher.wait_for(len(watcher.rewards) + 4, timeout_s=60)  # rewards flow on
        await agg.start()  # static membership: its partitions come straight back
        scored = await _scored(kafka, {m.batch_id for m, _ in batches}, timeout_s=180)
    _assert_each_sample_once(scored, batches)
