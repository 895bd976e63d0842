"""The project's Jaeger: where it listens, that spans arrive, how it stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from rewardbus.observability.jaeger import (
    JaegerConfig,
    JaegerError,
    JaegerProcess,
    answers,
    collector_config,
)
from rewardbus.observability.jaeger_query import JaegerQuery, TraceNotFound
from tests.support.poll import until_sync


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket process ``pid`` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                address, port = local.split(":")
                found.add((_address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:
        return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_address)[::-1])
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def test_config_names_every_listener_on_loopback() -> None:
    config = JaegerConfig(otlp_grpc_port=1, otlp_http_port=2, query_port=3, query_grpc_port=4)
    document = collector_config(config)
    endpoints = [
        document["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        document["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        document["extensions"]["jaeger_query"]["http"]["endpoint"],
        document["extensions"]["jaeger_query"]["grpc"]["endpoint"],
    ]
    assert endpoints == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]
    assert document["service"]["telemetry"]["metrics"] == {"level": "none"}


def test_listens_on_loopback_and_its_ports_only(jaeger: JaegerProcess) -> None:
    assert jaeger.pid is not None
    cfg = jaeger.config
    assert 0 not in cfg.ports
    assert _listening(jaeger.pid) == {("127.0.0.1", port) for port in cfg.ports}


def test_spans_sent_over_otlp_come_back_from_the_query_api(
    jaeger: JaegerProcess, jaeger_query: JaegerQuery
) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "jaeger-smoke"}))
    exporter = OTLPSpanExporter(endpoint=f"{jaeger.config.otlp_http_endpoint}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("smoke")
    with (
        tracer.start_as_current_span("parent", attributes={"rewardbus.sample_id": "smoke-1"}),
        tracer.start_as_current_span("child") as child,
    ):
        trace_id = f"{child.get_span_context().trace_id:032x}"
    provider.shutdown()

    def tagged() -> list[str]:
        return jaeger_query.find_trace_ids("rewardbus.sample_id", "smoke-1")

    until_sync(lambda: "jaeger-smoke" in jaeger_query.services(), "the service", timeout_s=10)
    # The service shows with the first span stored (the child ends first); the tagged
    # parent may land a moment later.
    until_sync(
        lambda: tagged() == [trace_id],
        lambda: f"trace {trace_id} by its tag, found {tagged()}",
        timeout_s=10,
    )
    spans = {span.name: span for span in jaeger_query.trace(trace_id)}
    assert set(spans) == {"parent", "child"}
    assert spans["child"].parent_id == spans["parent"].span_id
    assert spans["parent"].service == "jaeger-smoke"
    assert jaeger_query.find_trace_ids("rewardbus.sample_id", "no-such-sample") == []
    with pytest.raises(TraceNotFound):
        jaeger_query.trace("0" * 31 + "1")


def test_sigterm_stops_it_and_frees_its_ports(jaeger_binary: str) -> None:
    config = JaegerConfig(otlp_grpc_port=0, otlp_http_port=0, query_port=0, query_grpc_port=0)
    second = JaegerProcess(config, binary=Path(jaeger_binary))
    second.start()
    try:
        assert answers(second.config)
        pid = second.pid
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        assert second.wait(15) == 0
        assert not answers(second.config)
    finally:
        second.stop()
    assert second.log_path is None  # its work directory is gone


def test_a_port_in_use_is_reported(jaeger: JaegerProcess, jaeger_binary: str) -> None:
    taken = jaeger.config.query_port
    clash = JaegerConfig(
        otlp_grpc_port=0, otlp_http_port=0, query_port=taken, query_grpc_port=0, start_timeout_s=20
    )
    with pytest.raises(JaegerError, match="address already in use"):
        JaegerProcess(clash, binary=Path(jaeger_binary)).start()


def test_rewardbus_jaeger_command_runs_until_sigterm(jaeger_binary: str) -> None:
    del jaeger_binary  # the command finds the same cached build
    free = JaegerConfig(
        otlp_grpc_port=0, otlp_http_port=0, query_port=0, query_grpc_port=0
    ).with_free_ports()
    argv = [
        sys.executable, "-m", "rewardbus", "jaeger",
        "--otlp-grpc-port", str(free.otlp_grpc_port),
        "--otlp-http-port", str(free.otlp_http_port),
        "--query-port", str(free.query_port),
        "--query-grpc-port", str(free.query_grpc_port),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("Jaeger ready"), line + proc.stderr.read() if proc.stderr else ""
        assert free.query_url in line
        assert answers(free)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not answers(free)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
