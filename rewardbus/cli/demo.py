"""``rewardbus demo``: HumanEval through the whole pipeline, end to end."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping

from rewardbus.cli.common import Subcommands, add_kafka_flags, kafka_or_none
from rewardbus.cli.shutdown import shutdown_future
from rewardbus.errors import Unavailable, UsageError
from schemas import ENV_BOOTSTRAP

__all__ = ["add_parser", "run"]

# Where the demo's spans (and its worker processes') go with --trace: Jaeger takes
# traces only over OTLP, no metrics.
ENV_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    demo = sub.add_parser("demo", help="HumanEval through the whole pipeline, end to end")
    add_kafka_flags(demo)
    demo.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="sandbox worker processes to start; 0: drive a deployment's own workers",
    )
    demo.add_argument("--batch-size", type=int, default=32)
    demo.add_argument("--limit", type=int, default=None, help="only the first N problems")
    demo.add_argument("--json", action="store_true", help="print the summary as JSON last")
    demo.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    demo.add_argument("--timeout", type=float, default=600.0)
    demo.add_argument(
        "--ready-timeout",
        type=float,
        default=120.0,
        help="with --workers 0: seconds to wait for the deployment's brokers and topics",
    )
    demo.add_argument(
        "--trace",
        action="store_true",
        help="export every component's spans to Jaeger (started on 127.0.0.1 if none runs)",
    )
    demo.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """0 when every canonical solution passed and no broken one did."""
    from rewardbus.demo import DemoOptions, run_demo
    from rewardbus.telemetry import configure_tracing

    kafka = kafka_or_none(args, env, "demo")
    if args.workers < 0 or (args.workers == 0 and kafka is None):
        raise UsageError(
            "--workers must be at least 1, or 0 to drive a deployment's own workers"
            f" (that needs --bootstrap-servers or {ENV_BOOTSTRAP})"
        )
    jaeger_url = None
    if args.trace:
        jaeger_url, traces_endpoint = await _jaeger_for_demo(env)
        env = {**env, ENV_TRACES_ENDPOINT: traces_endpoint}
    options = DemoOptions(
        workers=args.workers,
        batch_size=args.batch_size,
        limit=args.limit,
        json=args.json,
        strict=not args.no_strict,
        timeout_s=args.timeout,
        ready_timeout_s=args.ready_timeout,
        kafka=kafka,
        jaeger_url=jaeger_url,
        worker_env=env,
    )
    if not args.verbose:  # the progress bar and summary are the demo's output
        logging.getLogger("consumers").setLevel(logging.WARNING)
    _, flush = configure_tracing("rewardbus-demo", env=env)
    try:
        return await run_demo(options, shutdown=shutdown_future())
    finally:
        flush()


async def _jaeger_for_demo(env: Mapping[str, str]) -> tuple[str, str]:
    """A Jaeger on its default ports that outlives the demo: its query URL and the
    OTLP traces endpoint the demo and its worker processes export to."""
    from rewardbus.observability.gotools import ToolBuildError
    from rewardbus.observability.jaeger import JaegerConfig, JaegerError, ensure_running
    from schemas import cache_root

    config = JaegerConfig()
    log = cache_root(env) / "jaeger.log"
    try:
        pid = await ensure_running(config, env=env, log_path=log)
    except (JaegerError, ToolBuildError) as exc:
        raise Unavailable(f"--trace: {exc}") from exc
    if pid is None:
        where = f"the Jaeger already running at {config.query_url}"
    else:
        where = f"Jaeger (pid {pid}, log {log}); it keeps the traces: stop it with `kill {pid}`"
    print(f"rewardbus demo: spans go to {where}", file=sys.stderr, flush=True)
    return config.query_url, f"{config.otlp_http_endpoint}/v1/traces"
