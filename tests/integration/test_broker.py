"""The embedded broker against the real thing: a Kafka JVM started from the cached jars."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kafkaio import AioClients, TopicSpec, ensure_topic, running
from rewardbus.runtime.broker import (
    BrokerConfig,
    BrokerError,
    EmbeddedBroker,
    default_kafka_lib,
    log4j2_properties,
    serve,
)
from schemas import KafkaSettings
from tests.processes import exited_within

REPO = Path(__file__).resolve().parents[2]


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains text (e.g. a broker's unique data directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # exited while we looked
        if text.encode() in cmdline:
            found.append(int(proc.name))
    return found


async def _create_topic(bootstrap: str, partitions: int = 2) -> str:
    topic = f"test-broker-{uuid.uuid4().hex[:12]}"
    admin = AioClients(KafkaSettings(bootstrap)).admin()
    async with running(admin):
        await ensure_topic(admin, TopicSpec(topic, partitions), timeout_s=30)
    return topic


async def _round_trip(bootstrap: str, topic: str, value: bytes) -> bytes:
    # Plain aiokafka clients, not the seam: the embedded broker must serve any Kafka client.
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), timeout=30)
    finally:
        await consumer.stop()
    return bytes(record.value)


def test_empty_jar_dir_is_a_clear_error(tmp_path: Path) -> None:
    broker = EmbeddedBroker(BrokerConfig(kafka_lib=tmp_path))
    with pytest.raises(BrokerError, match=r"Kafka jars not found in .*make kafka-jars"):
        broker.start()
    assert not broker.running
    broker.stop()


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match=r"java not found: install a Java 17\+ runtime"):
        EmbeddedBroker().start()


def test_port_is_unknown_before_start() -> None:
    with pytest.raises(BrokerError, match="start it first"):
        _ = EmbeddedBroker().bootstrap_servers
    assert EmbeddedBroker(BrokerConfig(port=19092)).bootstrap_servers == "127.0.0.1:19092"


async def test_create_produce_consume_stop() -> None:
    async with EmbeddedBroker() as broker:
        assert broker.bootstrap_servers.startswith("127.0.0.1:")
        # Ready means ready: no retry loop around the first client call.
        topic = await _create_topic(broker.bootstrap_servers)
        assert await _round_trip(broker.bootstrap_servers, topic, b"hello") == b"hello"
        pid = broker.pid
        assert pid is not None
    assert not broker.running
    assert exited_within(pid, 0)


def test_stop_is_idempotent_and_leaves_nothing_behind() -> None:
    broker = EmbeddedBroker()
    broker.start()
    pid, log = broker.pid, broker.log_path
    assert pid is not None
    assert log is not None
    data_dir = log.parent
    assert _processes_mentioning(str(data_dir)) == [pid]
    # The JVM runs with the one packaged log4j2 configuration.
    assert (data_dir / "log4j2.properties").read_text(encoding="utf-8") == log4j2_properties()

    broker.stop()
    broker.stop()

    assert broker.pid is None
    assert not broker.running
    assert exited_within(pid, 0)
    assert _processes_mentioning(str(data_dir)) == []
    assert not data_dir.exists()


async def test_kept_data_dir_survives_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig(data_dir=tmp_path / "kafka")
    async with EmbeddedBroker(config) as broker:
        topic = await _create_topic(broker.bootstrap_servers)
    # Picked afresh, the ports differ from the first run's: the stored cluster must not care.
    async with EmbeddedBroker(config) as broker:
        assert await _round_trip(broker.bootstrap_servers, topic, b"again") == b"again"
    assert (tmp_path / "kafka" / "broker.log").exists()


def test_a_broker_that_dies_at_start_up_reports_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = BrokerConfig(controller_port=taken.getsockname()[1], data_dir=tmp_path / "kafka")
        broker = EmbeddedBroker(config)
        with pytest.raises(
            BrokerError, match=r"(?s)exited with status 1 during start-up.*Address already in use"
        ):
            broker.start()
    assert not broker.running
    assert _processes_mentioning(str(tmp_path)) == []


async def test_serve_runs_until_shutdown() -> None:
    shutdown = asyncio.Event()
    addresses: list[str] = []

    def ready(bootstrap: str) -> None:
        addresses.append(bootstrap)
        shutdown.set()

    await asyncio.wait_for(
        serve(BrokerConfig(), shutdown=shutdown.wait(), on_ready=ready), timeout=120
    )
    assert len(addresses) == 1
    assert addresses[0].startswith("127.0.0.1:")


async def test_serve_aborts_a_start_up_when_shutdown_comes_first(tmp_path: Path) -> None:
    ready: list[str] = []
    config = BrokerConfig(data_dir=tmp_path / "kafka")
    await asyncio.wait_for(serve(config, shutdown=asyncio.sleep(0), on_ready=ready.append), 60)
    assert ready == []
    assert _processes_mentioning(str(tmp_path)) == []


async def test_serve_reports_a_broker_that_exits_on_its_own(tmp_path: Path) -> None:
    killed: list[int] = []

    def kill_the_broker(bootstrap: str) -> None:
        killed.extend(_processes_mentioning(str(tmp_path)))
        for pid in killed:
            os.kill(pid, signal.SIGKILL)

    config = BrokerConfig(data_dir=tmp_path / "kafka")
    never = asyncio.get_running_loop().create_future()
    with pytest.raises(BrokerError, match=r"exited unexpectedly with status -9"):
        await asyncio.wait_for(serve(config, shutdown=never, on_ready=kill_the_broker), 120)
    assert len(killed) == 1
    assert never.cancelled()


async def test_broker_dies_with_its_python_parent(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from rewardbus.runtime.broker import EmbeddedBroker\n"
        "broker = EmbeddedBroker()\n"
        "broker.start()\n"
        "print(broker.pid, broker.log_path.parent, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    parent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert parent.stdout is not None
    try:
        line = await asyncio.wait_for(parent.stdout.readline(), timeout=90)
    finally:
        parent.kill()
        await parent.wait()
    pid_text, data_dir = line.decode().split(maxsplit=1)
    java_pid = int(pid_text)
    try:
        assert await asyncio.to_thread(exited_within, java_pid, 30)
    finally:
        if not exited_within(java_pid, 0):
            os.kill(java_pid, signal.SIGKILL)  # never leak a broker, even from a failing test
        # A killed parent cannot remove its temporary data directory.
        shutil.rmtree(data_dir.strip(), ignore_errors=True)


def test_default_kafka_lib_honours_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REWARDBUS_KAFKA_LIB", "/opt/kafka/libs")
    assert default_kafka_lib() == Path("/opt/kafka/libs")
    monkeypatch.delenv("REWARDBUS_KAFKA_LIB")
    monkeypatch.setenv("REWARDBUS_CACHE", "/var/cache/rb")
    assert default_kafka_lib() == Path("/var/cache/rb/kafka-4.1.1/lib")
