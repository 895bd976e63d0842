"""What a deployment of many workers costs the brokers: requests, bytes, rebalances.

Phases (each on its own embedded broker, whose log directory is measured):

- ``traffic``: N small completions (two stdin/stdout tests each) through one in-process
  worker (concurrency 2), the aggregator and a learner. Every Kafka request each client
  sends is counted by type, with its bytes out and the response's bytes in (a wrapper
  around aiokafka's connection, keyed by client id); after the last batch is scored, the
  bytes each topic holds on disk. Reported per completion.
- ``rebalance``: a group of k plain consumers on a 48-partition topic (k = 1, 2, 4, 8,
  16); one more joins: how long until every member holds its new assignment, and the
  longest time any member held no partitions (aiokafka's eager protocol revokes all).
  Then static membership (``group_instance_id``): a member stops and comes back within
  its session timeout: do the others rebalance, and how long until it consumes again.
  Baseline in the same run: the same restart as a dynamic member.

    .venv/bin/python benchmarks/bench_scaling.py [--quick] [--completions N]

Human-readable lines, then one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import AIOKafkaConnection

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common

from _common import emit_json, quiet_logs, say

from consumers import AggregatorConfig, ScoredBatches, run_aggregator
from producers import RolloutProducer
from rewardbus.runtime.broker import BrokerConfig, EmbeddedBroker
from rewardbus.topics import await_group_members, ensure_topics
from rewardbus.wiring import SandboxOptions, build_executor
from sandbox_workers.service import WorkerConfig, run_worker
from schemas import BatchManifest, Completion, IoSuite, KafkaSettings, Topics

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
BATCH = 50
REBALANCE_PARTITIONS = 48


# --- request accounting ---------------------------------------------------------------


@dataclass
class Traffic:
    """Requests, bytes out and bytes in, per (client id, request type)."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_out: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_in: Counter[tuple[str, str]] = field(default_factory=Counter)

    def per_client(self, n: int) -> dict[str, Any]:
        clients = sorted({client for client, _ in self.requests})
        report: dict[str, Any] = {}
        for client in clients:
            keys = [k for k in self.requests if k[0] == client]
            report[client] = {
                "requests": round(sum(self.requests[k] for k in keys) / n, 3),
                "bytes_out": round(sum(self.bytes_out[k] for k in keys) / n, 1),
                "bytes_in": round(sum(self.bytes_in[k] for k in keys) / n, 1),
                "by_type": {
                    k[1]: round(self.requests[k] / n, 3)
                    for k in sorted(keys, key=lambda k: -self.requests[k])
                },
            }
        return report


@contextlib.contextmanager
def counting(traffic: Traffic) -> Iterator[None]:
    """Count every request aiokafka sends in this process (and its response bytes)."""
    send, handle = AIOKafkaConnection.send, AIOKafkaConnection._handle_frame

    def counted_send(self: Any, request: Any, expect_response: bool = True) -> Any:
        key = (self._client_id, type(request).__name__.split("_")[0])
        traffic.requests[key] += 1
        with contextlib.suppress(Exception):  # accounting must never break the client
            traffic.bytes_out[key] += len(request.prepare(self._versions).encode()) + 4
        return send(self, request, expect_response)

    def counted_frame(self: Any, resp: bytes) -> Any:
        if self._requests:
            name = type(self._requests[0][1]).__name__.split("_")[0]
            traffic.bytes_in[(self._client_id, name)] += len(resp) + 4
        return handle(self, resp)

    AIOKafkaConnection.send = counted_send
    AIOKafkaConnection._handle_frame = counted_frame
    try:
        yield
    finally:
        AIOKafkaConnection.send = send
        AIOKafkaConnection._handle_frame = handle


def topic_bytes(log_dir: Path, prefix: str) -> dict[str, int]:
    """Bytes of log segments per topic (all partitions) under a broker's log directory."""
    sizes: Counter[str] = Counter()
    for part in log_dir.glob(f"{prefix}*-*"):
        topic = part.name.rsplit("-", 1)[0].removeprefix(prefix)
        sizes[topic] += sum(f.stat().st_size for f in part.glob("*.log"))
    return dict(sizes)


# --- phase: traffic -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def broker() -> AsyncIterator[tuple[str, Path]]:
    with tempfile.TemporaryDirectory(prefix="rewardbus-bench-scaling-") as root:
        started = EmbeddedBroker(BrokerConfig(data_dir=Path(root)))
        await asyncio.to_thread(started.start)
        try:
            yield started.bootstrap_servers, Path(root) / "kraft-logs"
        finally:
            await asyncio.to_thread(started.stop)


def _batches(n: int) -> list[tuple[BatchManifest, list[Completion]]]:
    suite = IoSuite(inputs=["2 3\n", "10 -4\n"], outputs=["5\n", "6\n"])
    out = []
    for b in range(0, n, BATCH):
        batch_id = f"b{b // BATCH}"
        done = [
            Completion(
                sample_id=f"{batch_id}-s{i:03d}",
                batch_id=batch_id,
                group_id=f"{batch_id}-g{i // 5}",
                code=f"# {batch_id} {i}\n{ADD}",
                tests=suite,
            )
            for i in range(min(BATCH, n - b))
        ]
        manifest = BatchManifest(
            batch_id=batch_id,
            sample_ids=[c.sample_id for c in done],
            group_ids=[c.group_id for c in done],
            group_size=5,
            deadline=time.time() + 600,
        )
        out.append((manifest, done))
    return out


@contextlib.asynccontextmanager
async def _service(coro_factory: Any) -> AsyncIterator[None]:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ready = asyncio.Event()
    task = asyncio.ensure_future(coro_factory(stop, ready))
    waiter = asyncio.ensure_future(ready.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED, timeout=120)
    waiter.cancel()
    if task.done():
        task.result()
    try:
        yield
    finally:
        if not stop.done():
            stop.set_result(None)
        await asyncio.wait_for(task, timeout=120)


async def traffic_phase(n: int) -> dict[str, Any]:
    async with broker() as (bootstrap, log_dir):
        topics = Topics(prefix=f"s{uuid.uuid4().hex[:8]}.")

        def settings(role: str) -> KafkaSettings:
            return KafkaSettings(bootstrap_servers=bootstrap, topics=topics, client_id=role)

        await ensure_topics(settings("admin"), partitions=4)
        executor = build_executor(SandboxOptions(strict=True, worker_id="w1", concurrency=2))
        worker_config = WorkerConfig(group_id=f"{topics.prefix}workers", concurrency=2)
        agg_config = AggregatorConfig(group_id=f"{topics.prefix}agg")
        batches = _batches(n)
        traffic = Traffic()

        async def worker(stop: asyncio.Future[None], ready: asyncio.Event) -> object:
            return await run_worker(
                settings("worker"), worker_config, executor, shutdown=stop, ready=ready
            )

        async def aggregator(stop: asyncio.Future[None], ready: asyncio.Event) -> None:
            await run_aggregator(settings("aggregator"), agg_config, shutdown=stop, ready=ready)

        try:
            async with (
                _service(aggregator),
                _service(worker),
                ScoredBatches(settings("learner"), group_id=f"{topics.prefix}learner") as learner,
            ):
                await await_group_members(settings("admin"), worker_config.group_id, 1)
                started = time.monotonic()
                with counting(traffic):
                    async with RolloutProducer(settings("producer")) as producer:
                        for manifest, completions in batches:
                            await producer.publish_manifest(manifest)
                            await producer.publish_many(completions)
                    for manifest, _ in batches:
                        await learner.get(manifest.batch_id, timeout=300)
                elapsed = time.monotonic() - started
        finally:
            await executor.aclose()
        on_disk = topic_bytes(log_dir, topics.prefix)
    per_client = traffic.per_client(n)
    total_requests = sum(traffic.requests.values())
    say(f"traffic: {n} completions in {elapsed:.1f} s ({n / elapsed:.1f}/s)")
    say(f"  requests per completion, all clients: {total_requests / n:.2f}")
    for client, row in per_client.items():
        say(f"  {client:10s} {row['requests']:6.2f} req  {row['bytes_out']:8.0f} B out"
            f"  {row['bytes_in']:8.0f} B in  {row['by_type']}")  # fmt: skip
    say(f"  bytes on disk per completion: { {t: round(b / n) for t, b in on_disk.items()} }")
    return {
        "completions": n,
        "seconds": round(elapsed, 2),
        "requests_per_completion": round(total_requests / n, 3),
        "bytes_out_per_completion": round(sum(traffic.bytes_out.values()) / n, 1),
        "bytes_in_per_completion": round(sum(traffic.bytes_in.values()) / n, 1),
        "per_client": per_client,
        "disk_bytes_per_completion": {t: round(b / n, 1) for t, b in on_disk.items()},
    }


# --- phase: rebalance -----------------------------------------------------------------


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.revoked_at: float | None = None
        self.assigned_at: float | None = None
        self.revocations = 0
        self.assigned: set[Any] = set()
        self.changed = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.revoked_at = time.monotonic()
        self.revocations += 1

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned_at = time.monotonic()
        self.assigned = set(assigned)
        self.changed.set()


@dataclass
class _Member:
    consumer: AIOKafkaConsumer
    listener: _Listener
    task: asyncio.Task[None]


async def _member(bootstrap: str, topic: str, group: str, instance: str | None = None) -> _Member:
    listener = _Listener()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    consumer.subscribe([topic], listener=listener)

    async def poll() -> None:  # a member only takes part in a rebalance while it polls
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await consumer.getmany(timeout_ms=100)

    return _Member(consumer, listener, asyncio.ensure_future(poll()))


async def _stop(member: _Member) -> None:
    member.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await member.task
    await member.consumer.stop()


async def _settled(members: list[_Member], since: float, timeout_s: float = 180) -> float:
    """Wait until every member got an assignment after `since` covering all partitions."""
    deadline = time.monotonic() + timeout_s
    while True:
        fresh = all((m.listener.assigned_at or 0) > since for m in members)
        covered = sum(len(m.listener.assigned) for m in members) == REBALANCE_PARTITIONS
        if fresh and covered:
            return max(m.listener.assigned_at or 0 for m in members)
        if time.monotonic() > deadline:
            state = [(len(m.listener.assigned), m.listener.revocations) for m in members]
            raise TimeoutError(f"the group did not settle: (partitions, revocations) {state}")
        await asyncio.sleep(0.02)


async def _assigned_after(member: _Member, since: float, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not ((member.listener.assigned_at or 0) > since and member.listener.assigned):
        if time.monotonic() > deadline:
            raise TimeoutError("the member got no partitions back")
        await asyncio.sleep(0.02)


async def _topic(bootstrap: str) -> str:
    name = f"rebalance-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, REBALANCE_PARTITIONS, 1)])
        # A consumer subscribing before the broker's metadata lists every partition gets an
        # empty assignment and notices the topic only at its next metadata refresh.
        for _ in range(200):
            (described,) = await admin.describe_topics([name])
            leaders = [p["leader"] for p in described["partitions"]]
            if len(leaders) == REBALANCE_PARTITIONS and min(leaders) >= 0:
                break
            await asyncio.sleep(0.05)
    finally:
        await admin.close()
    return name


async def join_cost(bootstrap: str, k: int) -> dict[str, float]:
    """k members settled; one joins: time to a settled group, longest no-partition gap."""
    topic, group = await _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"
    members = [await _member(bootstrap, topic, group) for _ in range(k)]
    try:
        await _settled(members, since=0)
        joined_at = time.monotonic()
        members.append(await _member(bootstrap, topic, group))
        settled_at = await _settled(members, since=joined_at)
        paused = max(
            (m.listener.assigned_at or 0) - (m.listener.revoked_at or joined_at)
            for m in members[:-1]
        )
        return {"members_before": k, "join_to_settled_s": round(settled_at - joined_at, 3),
                "longest_pause_s": round(paused, 3)}  # fmt: skip
    finally:
        for member in members:
            await _stop(member)


async def restart_cost(bootstrap: str, *, static: bool, k: int = 4) -> dict[str, Any]:
    """One of k members stops and starts again: rebalances seen by the others, and how
    long until the restarted one holds partitions again."""
    topic, group = await _topic(bootstrap), f"g-{uuid.uuid4().hex[:8]}"

    def instance(i: int) -> str | None:
        return f"m{i}" if static else None

    members = [await _member(bootstrap, topic, group, instance(i)) for i in range(k)]
    try:
        await _settled(members, since=0)
        before = [m.listener.revocations for m in members[1:]]
        stopped_at = time.monotonic()
        await _stop(members[0])
        members[0] = await _member(bootstrap, topic, group, instance(0))
        await _assigned_after(members[0], stopped_at)
        back_at = members[0].listener.assigned_at or 0
        if not static:
            await _settled(members, since=stopped_at)
        # A benchmark, not a test: give a rebalance the others would go through time to show.
        await asyncio.sleep(2)
        others = sum(m.listener.revocations - b for m, b in zip(members[1:], before, strict=True))
        return {
            "static": static,
            "members": k,
            "restart_to_consuming_s": round(back_at - stopped_at, 3),
            "rebalances_seen_by_others": others,
        }
    finally:
        for member in members:
            await _stop(member)


async def rebalance_phase(sizes: list[int]) -> dict[str, Any]:
    async with broker() as (bootstrap, _):
        joins = []
        for k in sizes:
            row = await join_cost(bootstrap, k)
            say(f"rebalance: {k:2d} members + 1 joins: settled in {row['join_to_settled_s']:.2f} s,"
                f" longest pause {row['longest_pause_s']:.2f} s")  # fmt: skip
            joins.append(row)
        restarts = [await restart_cost(bootstrap, static=s) for s in (False, True)]
        for row in restarts:
            say(f"restart ({'static' if row['static'] else 'dynamic'} membership): consuming again"
                f" after {row['restart_to_consuming_s']:.2f} s, rebalances seen by the other"
                f" {row['members'] - 1}: {row['rebalances_seen_by_others']}")  # fmt: skip
    return {"join": joins, "restart": restarts}


async def main(args: argparse.Namespace) -> None:
    quiet_logs()
    n = args.completions or (100 if args.quick else 400)
    sizes = [1, 2] if args.quick else [1, 2, 4, 8, 16]
    report: dict[str, Any] = {"bench": "scaling", "cpus": os.cpu_count()}
    report["traffic"] = await traffic_phase(n)
    report["rebalance"] = await rebalance_phase(sizes)
    emit_json(report)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--completions", type=int, default=None)
    asyncio.run(main(parser.parse_args()))
