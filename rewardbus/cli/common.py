"""What several commands share: the Kafka and metrics flags, and what they become."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from rewardbus.errors import UsageError
from schemas import ENV_BOOTSTRAP, ENV_TOPIC_PREFIX, KafkaSettings, kafka_settings

if TYPE_CHECKING:
    from rewardbus.telemetry import Telemetry

__all__ = [
    "Subcommands",
    "add_kafka_flags",
    "add_metrics_flags",
    "kafka_or_none",
    "ready_line",
    "required_kafka",
    "telemetry",
]


class Subcommands(Protocol):
    """What a command's ``add_parser`` is given: ``ArgumentParser.add_subparsers()``."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def add_kafka_flags(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-servers`` and ``--topic-prefix``; flags win over the environment."""
    parser.add_argument(
        "--bootstrap-servers", help=f"Kafka bootstrap servers (env {ENV_BOOTSTRAP})"
    )
    parser.add_argument(
        "--topic-prefix",
        help=f"topic name prefix (env {ENV_TOPIC_PREFIX}); an empty one means no prefix",
    )


def kafka_or_none(
    args: argparse.Namespace, env: Mapping[str, str], client_id: str
) -> KafkaSettings | None:
    """The cluster the flags or the environment name; None when neither names one."""
    return kafka_settings(
        env, bootstrap=args.bootstrap_servers, topic_prefix=args.topic_prefix, client_id=client_id
    )


def required_kafka(
    args: argparse.Namespace, env: Mapping[str, str], client_id: str
) -> KafkaSettings:
    """The cluster, for commands that cannot run without one."""
    kafka = kafka_or_none(args, env, client_id)
    if kafka is None:
        raise UsageError(f"no Kafka cluster: pass --bootstrap-servers or set {ENV_BOOTSTRAP}")
    return kafka


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` and ``--metrics-host``: serve /metrics when a port is given."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (0: any free port)",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address for --metrics-port (default loopback)"
    )


def telemetry(service: str, args: argparse.Namespace, env: Mapping[str, str]) -> Telemetry:
    """Tracing, and /metrics when ``--metrics-port`` is given."""
    from rewardbus.telemetry import MetricsEndpoint, configure_telemetry

    endpoint = None
    if args.metrics_port is not None:
        if not 0 <= args.metrics_port <= 65535:
            raise UsageError("--metrics-port must be 0 (any free port) to 65535")
        endpoint = MetricsEndpoint(host=args.metrics_host, port=args.metrics_port)
    try:
        return configure_telemetry(service, env=env, metrics_endpoint=endpoint)
    except OSError as exc:
        raise UsageError(f"cannot serve metrics on {args.metrics_host}: {exc.strerror}") from None


def ready_line(what: str, telemetry: Telemetry) -> str:
    """The one line a started service prints (the demo and scripts wait for "ready")."""
    metrics = "" if telemetry.metrics_url is None else f" (metrics at {telemetry.metrics_url})"
    return f"{what} ready{metrics}"
