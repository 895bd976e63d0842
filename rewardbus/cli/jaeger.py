"""``rewardbus jaeger``: Jaeger v2 (in memory) on 127.0.0.1, until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rewardbus.cli.common import Subcommands
from rewardbus.cli.shutdown import shutdown_future

if TYPE_CHECKING:
    from rewardbus.observability.jaeger import JaegerConfig

__all__ = ["add_parser", "run"]


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    jaeger = sub.add_parser(
        "jaeger", help="run Jaeger v2 (in-memory) on 127.0.0.1; built once into the cache"
    )
    jaeger.add_argument("--otlp-grpc-port", type=int, default=4317)
    jaeger.add_argument("--otlp-http-port", type=int, default=4318)
    jaeger.add_argument("--query-port", type=int, default=16686, help="query API and UI")
    jaeger.add_argument("--query-grpc-port", type=int, default=16685)
    jaeger.add_argument("--max-traces", type=int, default=100_000)
    jaeger.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Serve in the foreground until stopped."""
    from rewardbus.observability.jaeger import JaegerConfig, serve

    config = JaegerConfig(
        otlp_grpc_port=args.otlp_grpc_port,
        otlp_http_port=args.otlp_http_port,
        query_port=args.query_port,
        query_grpc_port=args.query_grpc_port,
        max_traces=args.max_traces,
    )
    await serve(config, env=env, shutdown=shutdown_future(), on_ready=_ready)
    return 0


def _ready(running: JaegerConfig) -> None:
    print(
        f"Jaeger ready: OTLP/HTTP {running.otlp_http_endpoint}, OTLP/gRPC "
        f"{running.otlp_grpc_endpoint}, query {running.query_url} (Ctrl-C to stop)\n"
        f"  export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={running.otlp_http_endpoint}/v1/traces",
        flush=True,
    )
