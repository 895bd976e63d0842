"""The CLI's commands: each parses its flags into value objects and runs one stage."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from rewardbus import __version__
from rewardbus.cli import _shutdown_future
from rewardbus.errors import CommandFailed, Unavailable, UsageError
from rewardbus.settings import kafka_settings
from rewardbus.telemetry import MetricsEndpoint, Telemetry, configure_telemetry, configure_tracing
from schemas import KafkaSettings

__all__ = [
    "aggregator",
    "broker",
    "canary",
    "demo",
    "doctor",
    "jaeger",
    "judge",
    "prometheus",
    "top",
    "topics",
    "trace",
    "train_demo",
    "worker",
]


def _telemetry(service: str, args: argparse.Namespace) -> Telemetry:
    """Tracing, and /metrics when ``--metrics-port`` is given."""
    endpoint = None
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            raise UsageError("--metrics-port must be 0 (any free port) to 65535")
        endpoint = MetricsEndpoint(host=args.metrics_host, port=args.metrics_port)
    try:
        telemetry = configure_telemetry(service, env=os.environ, metrics_endpoint=endpoint)
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {args.metrics_host}: {exc.strerror}") from None
    return telemetry


def _ready_line(what: str, telemetry: Telemetry) -> str:
    """The one line a started service prints (the demo and scripts wait for "ready")."""
    metrics = "" if telemetry.metrics_url is None else f" (metrics at {telemetry.metrics_url})"
    return f"{what} ready{metrics}"


def _kafka(args: argparse.Namespace, client_id: str) -> KafkaSettings:
    kafka = kafka_settings(
        os.environ,
        bootstrap=args.bootstrap_servers,
        topic_prefix=args.topic_prefix,
        client_id=client_id,
    )
    if kafka is None:
        raise UsageError(
            "no Kafka cluster: pass --bootstrap-servers or set REWARDBUS_BOOTSTRAP_SERVERS"
        )
    return kafka


async def broker(args: argparse.Namespace) -> int:
    from rewardbus.broker import BrokerConfig, serve

    config = BrokerConfig(port=args.port, data_dir=Path(args.data_dir) if args.data_dir else None)

    def ready(bootstrap: str) -> None:
        print(f"Kafka broker ready at {bootstrap} (Ctrl-C to stop)", flush=True)

    await serve(config, shutdown=_shutdown_future(), on_ready=ready)
    return 0


async def cluster(args: argparse.Namespace) -> int:
    from rewardbus.cluster import ClusterConfig, serve_cluster

    root = Path(args.data_dir) if args.data_dir else None
    config = ClusterConfig(brokers=args.brokers, data_dir=root)

    def ready(bootstrap: str) -> None:
        print(f"Kafka cluster ready at {bootstrap} (Ctrl-C to stop)", flush=True)

    await serve_cluster(config, shutdown=_shutdown_future(), on_ready=ready)
    return 0


async def worker(args: argparse.Namespace) -> int:
    from rewardbus.wiring import SandboxOptions, build_executor
    from sandbox_workers.service import WorkerConfig, run_worker
    from sandbox_workers.watchdog import watching_the_loop

    kafka = _kafka(args, "rewardbus-worker")
    if args.loop_stall_s < 0:
        raise UsageError("--loop-stall-s must be 0 (off) or positive")
    optional: dict[str, Any] = {}
    if args.worker_id:
        optional["worker_id"] = args.worker_id
    if args.result_cache_mb is not None:
        if args.result_cache_mb < 0:
            raise UsageError("--result-cache-mb must be 0 (off) or positive")
        optional["result_cache_bytes"] = args.result_cache_mb << 20
    config = WorkerConfig(
        group_id=args.group_id,
        concurrency=args.concurrency,
        group_instance_id=args.instance_id,
        runtime_version=f"rewardbus-{__version__}",
        **optional,
    )
    executor = build_executor(
        SandboxOptions(
            strict=not args.no_strict, worker_id=config.worker_id, concurrency=config.concurrency
        )
    )
    telemetry = _telemetry("rewardbus-worker", args)
    flush = telemetry.shutdown
    ready = asyncio.Event()
    if args.stop_timeout_s <= 0:
        raise UsageError("--stop-timeout-s must be positive")
    shutdown = _shutdown_future(args.stop_timeout_s)

    async def announce() -> None:
        await ready.wait()
        # The demo (and operators' scripts) wait for this line.
        print(_ready_line(f"rewardbus worker {config.worker_id}", telemetry), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        async with watching_the_loop(args.loop_stall_s):
            await run_worker(kafka, config, executor, shutdown=shutdown, ready=ready)
    finally:
        announcer.cancel()
        flush()
    return 0


async def aggregator(args: argparse.Namespace) -> int:
    from consumers import AggregatorConfig, run_aggregator

    kafka = _kafka(args, "rewardbus-aggregator")
    telemetry = _telemetry("rewardbus-aggregator", args)
    ready = asyncio.Event()

    async def announce() -> None:
        await ready.wait()
        print(_ready_line("rewardbus aggregator", telemetry), flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await run_aggregator(
            kafka,
            AggregatorConfig(group_id=args.group_id),
            # Within Kubernetes' 30 s grace period for the aggregator.
            shutdown=_shutdown_future(stop_timeout_s=25.0),
            ready=ready,
        )
    finally:
        announcer.cancel()
        telemetry.shutdown()
    return 0


async def topics(args: argparse.Namespace) -> int:
    from rewardbus.topics import ensure_topics

    kafka = _kafka(args, "rewardbus-admin")
    await ensure_topics(
        kafka,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
    )
    for name in kafka.topics.all():
        print(name)
    return 0


async def judge(args: argparse.Namespace) -> int:
    from rewardbus.judge import judge_lines
    from rewardbus.wiring import SandboxOptions, build_executor

    executor = build_executor(SandboxOptions(strict=not args.no_strict, worker_id="judge"))
    if args.file == "-":
        return await judge_lines(sys.stdin, executor, out=sys.stdout)
    path = Path(args.file)
    try:
        text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return await judge_lines(text.splitlines(), executor, out=sys.stdout)


async def doctor(args: argparse.Namespace) -> int:
    from rewardbus.doctor import report

    del args
    return report(sys.stdout)


async def demo(args: argparse.Namespace) -> int:
    from rewardbus.demo import DemoOptions, run_demo

    bootstrap = args.bootstrap_servers or os.environ.get("REWARDBUS_BOOTSTRAP_SERVERS")
    if args.workers < 0 or (args.workers == 0 and not bootstrap):
        raise UsageError(
            "--workers must be at least 1, or 0 to drive a deployment's own workers"
            " (that needs --bootstrap-servers or REWARDBUS_BOOTSTRAP_SERVERS)"
        )
    options = DemoOptions(
        workers=args.workers,
        batch_size=args.batch_size,
        limit=args.limit,
        json=args.json,
        strict=not args.no_strict,
        timeout_s=args.timeout,
        bootstrap=bootstrap,
        jaeger_url=await _jaeger_for_demo() if args.trace else None,
        topic_prefix=args.topic_prefix or os.environ.get("REWARDBUS_TOPIC_PREFIX", ""),
    )
    if not args.verbose:  # the progress bar and summary are the demo's output
        logging.getLogger("consumers").setLevel(logging.WARNING)
    _, flush = configure_tracing("rewardbus-demo", env=os.environ)
    try:
        return await run_demo(options, shutdown=_shutdown_future())
    finally:
        flush()


async def _jaeger_for_demo() -> str:
    """A Jaeger on its default ports that outlives the demo; the demo's spans go there."""
    from rewardbus.observability.gotools import ToolBuildError, cache_root
    from rewardbus.observability.jaeger import JaegerConfig, JaegerError, ensure_running

    config = JaegerConfig()
    log = cache_root(os.environ) / "jaeger.log"
    try:
        pid = await ensure_running(config, env=os.environ, log_path=log)
    except (JaegerError, ToolBuildError) as exc:
        raise Unavailable(f"--trace: {exc}") from exc
    if pid is None:
        where = f"the Jaeger already running at {config.query_url}"
    else:
        where = f"Jaeger (pid {pid}, log {log}); it keeps the traces: stop it with `kill {pid}`"
    print(f"rewardbus demo: spans go to {where}", file=sys.stderr, flush=True)
    # Traces only (Jaeger takes no OTLP metrics); the worker processes inherit it.
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{config.otlp_http_endpoint}/v1/traces"
    return config.query_url


async def jaeger(args: argparse.Namespace) -> int:
    """``rewardbus jaeger``: Jaeger v2 in the foreground until SIGTERM or Ctrl-C."""
    from rewardbus.observability.jaeger import JaegerConfig, serve

    config = JaegerConfig(
        otlp_grpc_port=args.otlp_grpc_port,
        otlp_http_port=args.otlp_http_port,
        query_port=args.query_port,
        query_grpc_port=args.query_grpc_port,
        max_traces=args.max_traces,
    )

    def ready(running: JaegerConfig) -> None:
        print(
            f"Jaeger ready: OTLP/HTTP {running.otlp_http_endpoint}, OTLP/gRPC "
            f"{running.otlp_grpc_endpoint}, query {running.query_url} (Ctrl-C to stop)\n"
            f"  export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={running.otlp_http_endpoint}/v1/traces",
            flush=True,
        )

    await serve(config, env=os.environ, shutdown=_shutdown_future(), on_ready=ready)
    return 0


async def trace(args: argparse.Namespace) -> int:
    """``rewardbus trace SAMPLE_ID`` / ``--batch BATCH_ID``: a waterfall from Jaeger's API."""
    from rewardbus.observability.jaeger_query import DEFAULT_QUERY_URL, JaegerQuery, TraceNotFound
    from rewardbus.observability.trace_view import (
        batch_trace,
        render_batch,
        render_sample,
        sample_trace,
        waiting_for_spans,
    )
    from rewardbus.observability.waterfall import WaterfallStyle

    if bool(args.sample_id) == bool(args.batch):
        raise UsageError("give a SAMPLE_ID or --batch BATCH_ID (one of them)")
    url = args.jaeger_url or os.environ.get("REWARDBUS_JAEGER_URL") or DEFAULT_QUERY_URL
    query = JaegerQuery(url)
    style = WaterfallStyle(bar_width=max(10, args.width))

    def show() -> str:
        if args.batch:
            found = batch_trace(query, args.batch, lookback_s=args.lookback)
            return render_batch(found, as_json=args.json, style=style)
        one = sample_trace(query, args.sample_id, lookback_s=args.lookback)
        return render_sample(one, as_json=args.json, style=style)

    try:
        text = await asyncio.to_thread(waiting_for_spans, show, args.wait)
    except TraceNotFound as exc:
        raise CommandFailed(f"{exc} (at {url})") from exc
    print(text, flush=True)
    return 0


async def canary(args: argparse.Namespace) -> int:
    """``rewardbus canary``: the golden set through the live worker group (docs/canaries.md)."""
    from rewardbus.canary.command import run_command

    kafka = _kafka(args, "rewardbus-canary")
    telemetry = _telemetry("rewardbus-canary", args)
    if telemetry.metrics_url is not None:  # stdout is the report; scripts read this line
        print(f"rewardbus canary: metrics at {telemetry.metrics_url}", file=sys.stderr, flush=True)
    try:
        return await run_command(args, kafka, shutdown=_shutdown_future())
    finally:
        telemetry.shutdown()


async def train_demo(args: argparse.Namespace) -> int:
    """``rewardbus train-demo``; torch and verl are imported here, never at CLI import."""
    started = time.monotonic()
    try:
        from rewardbus.train_demo.loop import run_train_demo
    except ImportError as exc:
        raise Unavailable(
            f"train-demo needs the verl extra ({exc.name} is missing): make setup-verl"
        ) from None
    from rewardbus.train_demo.monitor import AlertRules
    from rewardbus.train_demo.options import TrainDemoOptions

    try:
        options = TrainDemoOptions(
            steps=args.steps,
            group_size=args.group_size,
            workers=args.workers,
            device=args.device,
            seed=args.seed,
            strict=not args.no_strict,
            json=args.json,
            plot=Path(args.plot),
            bootstrap=args.bootstrap_servers or os.environ.get("REWARDBUS_BOOTSTRAP_SERVERS"),
            alerts=AlertRules(max_response_length=args.max_response_length),
            tasks=tuple(name for name in args.tasks.split(",") if name),
            checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return await run_train_demo(options, shutdown=_shutdown_future(), started=started)


async def prometheus(args: argparse.Namespace) -> int:
    """``rewardbus prometheus``: scrape the given endpoints until SIGTERM."""
    from rewardbus.observability.prometheus import PrometheusConfig, serve

    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0 (any free port) to 65535")
    try:
        config = PrometheusConfig(
            port=args.port,
            targets=tuple(args.target),
            scrape_interval_s=args.scrape_interval,
            rule_files=tuple(Path(path) for path in args.rules),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for path in config.rule_files:
        if not path.is_file():
            raise UsageError(f"no rule file {path}")

    def ready(running: PrometheusConfig) -> None:
        print(
            f"Prometheus ready at {running.url}, scraping {len(running.targets)} target(s) "
            f"every {running.scrape_interval_s:g} s (Ctrl-C to stop)",
            flush=True,
        )

    await serve(config, env=os.environ, shutdown=_shutdown_future(), on_ready=ready)
    return 0


async def top(args: argparse.Namespace) -> int:
    """``rewardbus top``: redraw the live view until SIGTERM (or once)."""
    from rewardbus.observability.top import TopOptions, run_top

    try:
        options = TopOptions(
            metrics_urls=tuple(args.metrics or ()),
            prometheus_url=args.prometheus,
            interval_s=args.interval,
            window_s=args.window,
            once=args.once,
            width=args.width,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return await run_top(options, out=sys.stdout, shutdown=_shutdown_future())
