"""Reproduce: faust-streaming table recovery after ``kill -9`` (see README.md).

Not part of the package API. ``driver`` creates topics, produces rewards, runs the
``worker`` (a faust app whose changelog-backed table dedups rewards by sample_id and
forwards each first-seen sample), kills it with SIGKILL mid-stream, restarts it and
checks that (a) the restarted worker recovers its table within a time limit and
(b) every sample is forwarded, each once in the table's view.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

PARTITIONS = 4
LOG_DIR = tempfile.gettempdir()


def make_app(bootstrap: str, prefix: str, data_dir: str, guarantee: str) -> faust.App:
    app = faust.App(
        f"{prefix}agg",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        web_enabled=False,
        topic_partitions=PARTITIONS,
        topic_replication_factor=1,
        processing_guarantee=guarantee,
        broker_commit_every=10,
        broker_commit_interval=0.5,
        table_cleanup_interval=3600,
        # A SIGKILLed member is only evicted after the session timeout; keep it short.
        broker_session_timeout=10,
        broker_heartbeat_interval=2,
    )
    rewards = app.topic(
        f"{prefix}rewards", key_serializer="raw", value_serializer="raw", partitions=PARTITIONS
    )
    out = app.topic(
        f"{prefix}counted", key_serializer="raw", value_serializer="raw", partitions=PARTITIONS
    )
    seen = app.Table("seen", default=int, partitions=PARTITIONS)

    @app.agent(rewards)
    async def dedup(stream: faust.StreamT[bytes]) -> None:
        async for key, value in stream.items():
            sample = value.decode()
            if seen[sample] == 0:
                # Wait for the broker's ack of the output before the table
                # (changelog) records the sample as seen: state never runs ahead.
                sent = await out.send(key=key, value=value)
                await sent
                seen[sample] = 1
            else:
                seen[sample] += 1
            # Slow enough that the kill lands mid-stream.
            await asyncio.sleep(0.005)

    @app.task  # type: ignore[untyped-decorator]  # faust is untyped
    async def report_recovered() -> None:
        print(f"RECOVERED table_size={len(seen)} t={time.time():.3f}", flush=True)

    return app


def worker(bootstrap: str, prefix: str, data_dir: str, guarantee: str) -> None:
    app = make_app(bootstrap, prefix, data_dir, guarantee)
    sys.argv = [sys.argv[0], "worker", "-l", "info", "--without-web"]
    app.main()


async def create_topics(bootstrap: str, prefix: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(f"{prefix}rewards", PARTITIONS, 1),
                NewTopic(f"{prefix}counted", PARTITIONS, 1),
            ]
        )
    finally:
        await admin.close()


async def produce(bootstrap: str, prefix: str, ids: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for sid in ids:
            await producer.send(
                f"{prefix}rewards", key=f"b{int(sid[1:]) % 16}".encode(), value=sid.encode()
            )
        await producer.flush()
    finally:
        await producer.stop()


async def count_output(bootstrap: str, prefix: str, want: int, within_s: float) -> list[str]:
    consumer = AIOKafkaConsumer(
        f"{prefix}counted",
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got: list[str] = []
    try:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline and len(set(got)) < want:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                got.extend(r.value.decode() for r in records)
    finally:
        await consumer.stop()
    return got


async def analyse(bootstrap: str, prefix: str) -> None:
    """Where the lost samples sit: input offsets vs the group's committed offsets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(f"{prefix}agg")
        found: dict[str, dict[str, tuple[int, int]]] = {}
        for topic in (f"{prefix}rewards", f"{prefix}counted"):
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            found[topic] = {}
            while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    for r in records:
                        found[topic][r.value.decode()] = (tp.partition, r.offset)
        rewards, counted = found[f"{prefix}rewards"], found[f"{prefix}counted"]
        for p in range(PARTITIONS):
            tp = TopicPartition(f"{prefix}rewards", p)
            lost = sorted(off for s, (q, off) in rewards.items() if q == p and s not in counted)
            meta = committed.get(tp)
            print(
                f"  rewards[{p}]: end={ends_of(rewards, p)} committed="
                f"{meta.offset if meta else None} never_forwarded={len(lost)}"
                + (f" offsets {lost[0]}..{lost[-1]}" if lost else "")
            )
    finally:
        await admin.close()
        await consumer.stop()


def ends_of(records: dict[str, tuple[int, int]], partition: int) -> int:
    return 1 + max((off for q, off in records.values() if q == partition), default=-1)


def spawn(bootstrap: str, prefix: str, data_dir: str, log: str) -> subprocess.Popen[bytes]:
    guarantee = os.environ.get("REPRO_GUARANTEE", "at_least_once")
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "worker",
            "--bootstrap",
            bootstrap,
            "--prefix",
            prefix,
            "--data-dir",
            data_dir,
            "--guarantee",
            guarantee,
        ],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )


def driver(bootstrap: str, n: int, recover_timeout: float, kills: int, members: int) -> int:
    """Keep ``members`` workers running; SIGKILL the oldest ``kills`` times, then finish."""
    prefix = f"repro{uuid.uuid4().hex[:8]}."
    ids = [f"s{i}" for i in range(n)]
    asyncio.run(create_topics(bootstrap, prefix))
    asyncio.run(produce(bootstrap, prefix, ids))
    forwarded: list[str] = []
    alive: list[subprocess.Popen[bytes]] = []
    spawned = 0

    def top_up() -> None:
        nonlocal spawned
        while len(alive) < members:
            log = f"{LOG_DIR}/{prefix}worker{spawned}.log"
            alive.append(spawn(bootstrap, prefix, f"{LOG_DIR}/{prefix}data{spawned}", log))
            spawned += 1

    for cycle in range(kills):
        top_up()
        target = len(set(forwarded)) + n // (kills + 2)
        forwarded = asyncio.run(count_output(bootstrap, prefix, target, recover_timeout))
        victim = alive.pop(0)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        print(f"cycle {cycle}: SIGKILL after {len(set(forwarded))} forwarded", flush=True)
        if len(set(forwarded)) < target:
            print(f"FAIL: cycle {cycle} made no progress within {recover_timeout}s")
            return 1
    started = time.monotonic()
    top_up()
    got = asyncio.run(count_output(bootstrap, prefix, n, recover_timeout))
    elapsed = time.monotonic() - started
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    for proc in alive:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    missing = sorted(set(ids) - set(got), key=lambda s: int(s[1:]))
    dup = len(got) - len(set(got))
    print(
        f"final: forwarded={len(set(got))}/{n} forwarded_twice={dup} "
        f"missing={len(missing)} waited={elapsed:.1f}s logs={LOG_DIR}/{prefix}worker*.log"
    )
    if missing:
        print(
            f"FAIL: {len(missing)} samples never forwarded within {recover_timeout}s "
            f"(first: {missing[:5]})"
        )
        asyncio.run(analyse(bootstrap, prefix))
        return 1
    print("OK")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["driver", "worker"])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--prefix", default="")
    parser.add_argument("--data-dir", default=f"{LOG_DIR}/faust-repro")
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--recover-timeout", type=float, default=90)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument(
        "--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once"]
    )
    args = parser.parse_args()
    if args.mode == "worker":
        worker(args.bootstrap, args.prefix, args.data_dir, args.guarantee)
        return 0
    os.environ["REPRO_GUARANTEE"] = args.guarantee
    return driver(args.bootstrap, args.n, args.recover_timeout, args.kills, args.members)


if __name__ == "__main__":
    sys.exit(main())
