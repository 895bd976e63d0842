"""Helpers shared by the pipeline benchmarks: a cluster, fresh topics, timing, reporting.

Every benchmark prints human-readable lines first and exactly one JSON object on
its last line (``emit_json``), so scripts can ``tail -n1 | jq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from producers import RolloutProducer
from rewardbus.observability.percentiles import Percentiles
from rewardbus.runtime.local import (
    RewardWatcher,
    WorkerPoolOptions,
    embedded_broker,
    stop_processes,
    worker_pool,
)
from rewardbus.topics import await_group_members, ensure_topics
from schemas import Completion, KafkaSettings, RewardEvent, Topics

__all__ = [
    "Cluster",
    "CpuMeter",
    "Target",
    "Timeline",
    "cluster",
    "cpus_for",
    "emit_json",
    "fresh_kafka",
    "percentiles",
    "publish_timed",
    "quiet_logs",
    "rate",
    "ratio",
    "say",
    "stage_breakdown",
    "wait_all",
    "workers",
]


def say(message: str) -> None:
    """Progress goes to stderr: stdout holds the results and the final JSON line."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def quiet_logs() -> None:
    """Only warnings: per-record INFO logging would itself cost throughput and hide results."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("aiokafka", "consumers", "sandbox_workers", "rewardbus"):
        logging.getLogger(name).setLevel(logging.WARNING)


def percentiles(values_ms: Sequence[float]) -> dict[str, float]:
    """n, p50/p99/max (:class:`Percentiles`' rule) and mean of millisecond samples, rounded."""
    summary = Percentiles.of(values_ms, digits=2)
    return {
        "n": len(values_ms),
        "p50": summary.p50,
        "p99": summary.p99,
        "max": summary.max,
        "mean": round(statistics.fmean(values_ms), 2) if values_ms else 0.0,
    }


def rate(count: int, seconds: float) -> float:
    """Items per second, guarded against a zero interval."""
    return count / max(seconds, 1e-9)


def ratio(numerator: float, denominator: float) -> float:
    """A ratio rounded for reports; 0 when the baseline is 0 (a failed baseline, not infinity)."""
    return round(numerator / denominator, 3) if denominator else 0.0


@dataclass(frozen=True)
class Target:
    """One acceptance target from the issue: ``value`` compared with ``limit``."""

    name: str
    value: float
    limit: float
    at_most: bool  # True: value <= limit passes (or < when strict); False: value >= limit
    strict: bool = False
    unit: str = ""

    @property
    def passed(self) -> bool:
        if self.at_most:
            return self.value < self.limit if self.strict else self.value <= self.limit
        return self.value > self.limit if self.strict else self.value >= self.limit

    def line(self) -> str:
        op = ("<" if self.strict else "<=") if self.at_most else (">" if self.strict else ">=")
        verdict = "PASS" if self.passed else "FAIL"
        wanted = f"{op} {self.limit:g}{self.unit}"
        return f"  [{verdict}] {self.name}: {self.value:g}{self.unit} (target {wanted})"

    def as_json(self) -> dict[str, Any]:
        op = ("<" if self.strict else "<=") if self.at_most else (">" if self.strict else ">=")
        return {"value": self.value, "target": f"{op} {self.limit:g}", "pass": self.passed}


def emit_json(report: dict[str, Any]) -> None:
    """The one machine-readable line, always the last line of stdout."""
    print(json.dumps(report, sort_keys=True), flush=True)


def cpus_for(count: int) -> list[int]:
    """The first ``count`` CPUs this process may run on (one core's budget each)."""
    allowed = sorted(os.sched_getaffinity(0))
    if count > len(allowed):
        raise SystemExit(f"need {count} CPUs to pin to, have {len(allowed)}")
    return allowed[:count]


@dataclass(frozen=True)
class Cluster:
    """Where the benchmark's Kafka is, and the broker's pid when we started it."""

    bootstrap: str
    broker_pid: int | None = None


@contextlib.asynccontextmanager
async def cluster(
    bootstrap: str | None, *, preallocate_heap: bool = False
) -> AsyncIterator[Cluster]:
    """The given cluster, or an embedded single-node broker for the run's duration
    (``preallocate_heap``: its whole heap committed at start, see ``BrokerConfig``)."""
    if bootstrap:
        yield Cluster(bootstrap)
        return
    say("starting the embedded Kafka broker")
    async with embedded_broker(preallocate_heap=preallocate_heap) as started:
        yield Cluster(started, child_java_pid())


async def fresh_kafka(bootstrap: str, phase: str, *, partitions: int = 4) -> KafkaSettings:
    """Settings with a new uuid topic prefix, topics created: no phase sees another's records."""
    prefix = f"bench-{phase}-{uuid.uuid4().hex[:8]}."
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, topics=Topics(prefix=prefix), client_id=phase
    )
    await ensure_topics(kafka, partitions=partitions)
    return kafka


@contextlib.asynccontextmanager
async def workers(
    kafka: KafkaSettings,
    count: int,
    *,
    cache_mb: int | None,
    tag: str,
    concurrency: int = 1,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[list[int]]:
    """``count`` worker processes, worker i pinned to its own CPU; logs in a temp dir.

    ``cache_mb=None`` keeps the worker's default result cache; 0 switches it off.
    ``concurrency`` is each worker's executions at once (the worker's default is 1);
    ``extra_args`` more ``rewardbus worker`` flags.
    """
    extra = [*extra_args, *([] if cache_mb is None else ["--result-cache-mb", str(cache_mb)])]
    with tempfile.TemporaryDirectory(prefix=f"rewardbus-bench-{tag}-") as logs:
        options = WorkerPoolOptions(
            workers=count,
            group_id=f"{kafka.topics.prefix}workers",
            log_dir=Path(logs),
            cpus=cpus_for(count),
            extra_args=extra,
            worker_id_prefix=f"bench-{tag}",
            concurrency=concurrency,
        )
        started = time.monotonic()
        async with worker_pool(kafka, options) as procs:
            say(f"{count} worker(s) ready in {time.monotonic() - started:.1f} s ({tag})")
            yield [proc.pid for proc in procs]


_RELAY = Path(__file__).resolve().parent / "_relay.py"


@contextlib.asynccontextmanager
async def relays(kafka: KafkaSettings, count: int, period_ms: float) -> AsyncIterator[list[int]]:
    """``count`` processes of ``_relay.py`` (Kafka's floor: consume, answer, judge nothing;
    each at most one record per ``period_ms``) where ``workers`` puts sandbox workers,
    pinned the same way."""
    group_id = f"{kafka.topics.prefix}workers"
    procs: list[asyncio.subprocess.Process] = []
    try:
        for index, cpu in enumerate(cpus_for(count)):
            argv = [sys.executable, str(_RELAY), kafka.bootstrap_servers, kafka.topics.prefix]
            procs.append(
                await asyncio.create_subprocess_exec(
                    *argv,
                    group_id,
                    f"relay-{index}",
                    str(period_ms),
                    stdout=asyncio.subprocess.PIPE,
                    preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}),
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
            if b"ready" not in line:
                raise RuntimeError(f"the Kafka relay did not start (status {proc.returncode})")
        await await_group_members(kafka, group_id, count)
        say(f"{count} Kafka relay(s) ready")
        yield [proc.pid for proc in procs]
    finally:
        await stop_processes(procs)


@dataclass
class Timeline:
    """When each sample was sent, and (from a RewardWatcher) when its reward arrived."""

    sent_at: dict[str, float] = field(default_factory=dict)

    def reward_ms(self, watcher: RewardWatcher) -> dict[str, float]:
        """produce → reward, in ms, by sample id, for every sample that has both ends."""
        return {
            key: (arrived - self.sent_at[key]) * 1000
            for key, arrived in watcher.arrived_at.items()
            if key in self.sent_at
        }

    def span_s(self, watcher: RewardWatcher) -> float:
        """First send to last reward: the wall time the whole workload took."""
        ours = [watcher.arrived_at[k] for k in self.sent_at if k in watcher.arrived_at]
        return max(ours, default=0.0) - min(self.sent_at.values(), default=0.0)


async def publish_timed(
    producer: RolloutProducer, completions: Iterable[Completion], timeline: Timeline
) -> int:
    """Publish pipelined (as a trainer would), stamping each sample just before its send."""
    batch = list(completions)
    now = time.monotonic()
    for completion in batch:
        timeline.sent_at[completion.sample_id] = now
    return await producer.publish_many(batch)


def stage_breakdown(events: Iterable[RewardEvent], total_ms: dict[str, float]) -> dict[str, Any]:
    """Where produce → reward went: Kafka queue wait, execution, and the rest.

    ``queue_ms`` (producer timestamp to worker pick-up) and ``exec_ms`` come from
    each RewardEvent; "rest" is the end-to-end latency minus both (reward produce,
    the watcher's fetch, and any wait for an execution slot after pick-up).
    """
    queue, execute, rest = [], [], []
    for event in events:
        if event.sample_id not in total_ms:
            continue
        queue.append(event.queue_ms)
        execute.append(event.exec_ms)
        rest.append(total_ms[event.sample_id] - event.queue_ms - event.exec_ms)
    return {
        "queue_ms": percentiles(queue),
        "exec_ms": percentiles(execute),
        "rest_ms": percentiles(rest),
    }


async def wait_all(watcher: RewardWatcher, sample_ids: Iterable[str], timeout_s: float) -> None:
    """Wait until every one of ``sample_ids`` has a reward (other rewards do not count)."""
    wanted = set(sample_ids)
    async with asyncio.timeout(timeout_s):
        while not wanted <= watcher.rewards.keys():
            await watcher.changed()


# -- where the CPU went ---------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK")
# Where the jail puts each worker's per-execution cgroups (instance dirs "w<pid>-<n>",
# see sandbox_workers/jail/cgroups.py): v1 cpuacct, or any v2 hierarchy. Best effort:
# if the jail's layout changes, sandbox CPU reads as 0 and lands in "unattributed".
_SANDBOX_CGROUPS = (
    ("/sys/fs/cgroup/cpuacct/rewardbus/w{pid}-*/cpuacct.usage", 1e-9),
    ("/sys/fs/cgroup/rewardbus/w{pid}-*/cpu.stat", 1e-6),
    ("/sys/fs/cgroup/unified/rewardbus/w{pid}-*/cpu.stat", 1e-6),
)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process, all threads (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS


def own_and_children_cpu_s() -> float:
    """CPU seconds of this process and of its children it has reaped."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (every tenant, kernel threads too)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / _TICKS


def sandbox_cpu_s(pid: int) -> float:
    """CPU seconds charged to the per-execution cgroups of the worker with ``pid``."""
    total = 0.0
    for pattern, scale in _SANDBOX_CGROUPS:
        for path in Path("/").glob(pattern.format(pid=pid).lstrip("/")):
            try:
                text = path.read_text()
            except OSError:
                continue  # the slot was removed between glob and read
            if path.name == "cpu.stat":
                keyed = dict(line.split() for line in text.splitlines() if line)
                total += int(keyed.get("usage_usec", 0)) * scale
            else:
                total += int(text.split()[0]) * scale
    return total


def child_java_pid() -> int | None:
    """The embedded broker: the JVM this process started (None with an external cluster)."""
    me = os.getpid()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name == "java" and int(text.rsplit(")", 1)[1].split()[1]) == me:
            return int(stat.parent.name)
    return None


@dataclass(frozen=True)
class CpuMeter:
    """CPU seconds by component between two snapshots, to see where a run's time went.

    Components: the benchmark process itself (producer, aggregator, watchers), the
    broker JVM, the worker processes (Kafka clients, decoding, orchestration), the
    sandboxed executions (their cgroups), and "unattributed": whatever else the
    machine did — kernel work not charged to a cgroup (e.g. network-namespace
    teardown) and other tenants of a shared machine.
    """

    workers: tuple[int, ...] = ()
    broker: int | None = None
    include_self: bool = True  # False when this process is itself the measured executor

    def snapshot(self) -> dict[str, float]:
        snap = {
            "machine": machine_busy_s(),
            "worker_processes": sum(process_cpu_s(pid) for pid in self.workers),
            "sandboxed": sum(sandbox_cpu_s(pid) for pid in self.workers),
        }
        if self.include_self:
            snap["bench_process"] = process_cpu_s(os.getpid())
        if self.broker:
            snap["broker"] = process_cpu_s(self.broker)
        return snap

    @staticmethod
    def per_item_ms(
        before: dict[str, float], after: dict[str, float], items: int
    ) -> dict[str, float]:
        """CPU ms per completion by component, plus the unattributed rest."""
        spent = {key: after[key] - before[key] for key in before}
        known = sum(v for k, v in spent.items() if k != "machine")
        spent["unattributed"] = spent["machine"] - known
        return {key: round(1000 * value / max(items, 1), 2) for key, value in spent.items()}

    async def standby_ms_per_s(self, seconds: float) -> dict[str, float]:
        """CPU ms per second of wall time by component while nothing is asked of them.

        Idle consumers still poll (the worker's fetches wait 20 ms, the aggregator's
        50 ms) and the broker answers each: a cost per second, not per completion,
        so a run that takes longer (a busier machine) shows more CPU per completion.
        """
        before, started = self.snapshot(), time.monotonic()
        await asyncio.sleep(seconds)
        after, elapsed = self.snapshot(), time.monotonic() - started
        per_s = CpuMeter.per_item_ms(before, after, 1)
        return {key: round(value / elapsed, 1) for key, value in per_s.items()}
