"""The ``rewardbus`` command line: the only code that touches signals and the environment."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from rewardbus.errors import KINDS, ShellError

__all__ = ["main"]

log = logging.getLogger("rewardbus")

# What each exit status means, the same for every command (README: "Exit statuses").
EXIT_STATUSES: tuple[tuple[int, str], ...] = (
    (0, "done; a check the command ran (demo, judge, canary, doctor) passed"),
    *((kind.exit_code, kind.meaning) for kind in KINDS),
    (70, "worker: the event loop stalled (--loop-stall-s); restart it"),
    (130, "interrupted (Ctrl-C); a second SIGTERM or SIGINT exits 128 + the signal"),
)


def _epilog() -> str:
    rows = "\n".join(f"  {code:>3}  {meaning}" for code, meaning in EXIT_STATUSES)
    return f"exit statuses, the same for every command:\n{rows}"


def _shutdown_future(stop_timeout_s: float | None = None) -> asyncio.Future[None]:
    """A future resolved by the first SIGTERM or SIGINT (a second one kills hard).

    With ``stop_timeout_s``, a process still running that long after the signal exits
    with status 1 (as an orchestrator's grace period would end it): a service whose
    broker is gone can otherwise wait on it for ever. A thread keeps the time, so a
    blocked event loop cannot hold it up.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def overdue() -> None:
        log.error("not stopped %.0f s after the signal: exiting", stop_timeout_s)
        logging.shutdown()
        os._exit(1)

    def trigger(signum: int) -> None:
        if fut.done():
            os._exit(128 + signum)
        log.info("received %s: shutting down", signal.Signals(signum).name)
        fut.set_result(None)
        if stop_timeout_s is not None:
            timer = threading.Timer(stop_timeout_s, overdue)
            timer.daemon = True
            timer.start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, trigger, signum)
    return fut


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-servers",
        help="Kafka bootstrap servers (env REWARDBUS_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument("--topic-prefix", help="topic name prefix (env REWARDBUS_TOPIC_PREFIX)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rewardbus",
        description=__doc__,
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="HumanEval through the whole pipeline, end to end")
    _common(demo)
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
        "--trace",
        action="store_true",
        help="export every component's spans to Jaeger (started on 127.0.0.1 if none runs)",
    )

    _train_demo_parser(sub)
    _canary_parser(sub)

    broker = sub.add_parser("broker", help="run the embedded single-node Kafka broker")
    broker.add_argument("--port", type=int, default=9092)
    broker.add_argument("--data-dir", default=None)

    cluster = sub.add_parser(
        "cluster", help="run a local multi-broker KRaft Kafka cluster (fault tests, rehearsals)"
    )
    cluster.add_argument("--brokers", type=int, default=3)
    cluster.add_argument("--data-dir", default=None, help="parent of each node's data dir")

    worker = sub.add_parser("worker", help="run one sandbox worker (consumer-group member)")
    _common(worker)
    worker.add_argument("--group-id", default="rewardbus-workers")
    worker.add_argument("--concurrency", type=int, default=1)
    worker.add_argument("--worker-id", default=None)
    worker.add_argument("--instance-id", default=None, help="static group membership id")
    worker.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    worker.add_argument(
        "--stop-timeout-s",
        type=float,
        default=50.0,
        help="exit (status 1) if still running this long after SIGTERM: the drain (30 s)"
        " and the final commit fit, and it ends before Kubernetes' 60 s grace period",
    )
    worker.add_argument(
        "--loop-stall-s",
        type=float,
        default=60.0,
        help="exit (status 70) when the event loop stops this long: a completion wedged"
        " the worker; it is restarted and the record counted towards quarantine (0: off)",
    )
    worker.add_argument(
        "--result-cache-mb",
        type=int,
        default=None,
        metavar="N",
        help="result cache budget in MiB (0 disables the cache; default 256)",
    )
    _metrics_flags(worker)

    agg = sub.add_parser("aggregator", help="run the learner-side stream aggregator")
    _common(agg)
    agg.add_argument("--group-id", default="rewardbus-aggregator")
    _metrics_flags(agg)

    topics = sub.add_parser("topics", help="create the rewardbus topics")
    _common(topics)
    topics.add_argument("--partitions", type=int, default=4)
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument(
        "--min-insync-replicas", type=int, default=None, help="default: the broker's setting"
    )

    judge = sub.add_parser("judge", help="judge completions from a JSON-lines file, no Kafka")
    judge.add_argument("file", help="JSON lines, one Completion each ('-' for stdin)")
    judge.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")

    sub.add_parser("doctor", help="report which sandbox isolation layers work on this host")
    _observability_parsers(sub)
    _metrics_parsers(sub)
    return p


def _observability_parsers(sub: Any) -> None:
    jaeger = sub.add_parser(
        "jaeger", help="run Jaeger v2 (in-memory) on 127.0.0.1; built once into the cache"
    )
    jaeger.add_argument("--otlp-grpc-port", type=int, default=4317)
    jaeger.add_argument("--otlp-http-port", type=int, default=4318)
    jaeger.add_argument("--query-port", type=int, default=16686, help="query API and UI")
    jaeger.add_argument("--query-grpc-port", type=int, default=16685)
    jaeger.add_argument("--max-traces", type=int, default=100_000)

    trace = sub.add_parser(
        "trace", help="one sample's (or batch's) trace from Jaeger, as a waterfall"
    )
    trace.add_argument("sample_id", nargs="?", help="the sample to show")
    trace.add_argument("--batch", metavar="BATCH_ID", help="show a scored batch and its samples")
    trace.add_argument("--json", action="store_true", help="print the span tree as JSON")
    trace.add_argument(
        "--jaeger-url",
        default=None,
        help="Jaeger query service (env REWARDBUS_JAEGER_URL; default http://127.0.0.1:16686)",
    )
    trace.add_argument(
        "--lookback", type=float, default=86_400.0, metavar="S", help="search this far back"
    )
    trace.add_argument(
        "--wait", type=float, default=5.0, metavar="S", help="wait this long for late spans"
    )
    trace.add_argument("--width", type=int, default=40, help="bar width in characters")


def _metrics_parsers(sub: Any) -> None:
    prom = sub.add_parser(
        "prometheus",
        help="run Prometheus on 127.0.0.1, scraping the given /metrics endpoints",
    )
    prom.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a worker's or aggregator's --metrics-port endpoint (repeatable)",
    )
    prom.add_argument("--port", type=int, default=9090, help="its HTTP API and UI (0: any free)")
    prom.add_argument(
        "--scrape-interval", type=float, default=2.0, metavar="S", help="seconds (default 2)"
    )
    prom.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="FILE",
        help="alert rule file to evaluate, e.g. infra/prometheus/rewardbus.rules.yml (repeatable)",
    )

    top = sub.add_parser("top", help="live view of a running deployment from its metrics")
    source = top.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--metrics",
        action="append",
        default=None,
        metavar="URL",
        help="a /metrics endpoint to scrape (repeatable)",
    )
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus that scrapes them")
    top.add_argument("--interval", type=float, default=2.0, metavar="S", help="redraw period")
    top.add_argument(
        "--window", type=float, default=30.0, metavar="S", help="rate look-back (--prometheus)"
    )
    top.add_argument("--once", action="store_true", help="render one frame and exit")
    top.add_argument("--width", type=int, default=80)


def _metrics_flags(parser: argparse.ArgumentParser) -> None:
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


def _rate(text: str) -> float:
    from rewardbus.canary.loop import parse_rate

    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _canary_parser(sub: Any) -> None:
    canary = sub.add_parser(
        "canary",
        help="judge the golden set continuously through the live topics (docs/canaries.md)",
    )
    _common(canary)
    canary.add_argument(
        "--rate", type=_rate, default="0.2/s", help="canaries per second (0.2/s, 12/min, 30/h)"
    )
    canary.add_argument("--once", action="store_true", help="one pass over the set, then exit")
    canary.add_argument("--rounds", type=int, default=None, help="passes over the set, then exit")
    canary.add_argument("--languages", default="", help="comma-separated subset of languages")
    canary.add_argument("--golden", default=None, help="a directory of golden-set TOML files")
    canary.add_argument("--timeout", type=float, default=180.0, help="seconds to wait per canary")
    canary.add_argument("--max-in-flight", type=int, default=8)
    _metrics_flags(canary)


def _train_demo_parser(sub: Any) -> None:
    train = sub.add_parser(
        "train-demo",
        help="GRPO on a tiny policy, every reward from the sandbox pipeline (needs the verl extra)",
    )
    _common(train)
    train.add_argument("--steps", type=int, default=100)
    train.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    train.add_argument("--group-size", type=int, default=32, help="samples per prompt")
    train.add_argument("--device", choices=("auto", "cpu", "cuda", "npu"), default="auto")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument(
        "--plot", default="train-demo.png", help="PNG of the curves (default ./train-demo.png)"
    )
    train.add_argument("--json", action="store_true", help="print the summary as JSON last")
    train.add_argument("--no-strict", action="store_true", help="allow a degraded sandbox")
    train.add_argument(
        "--tasks", default="", metavar="NAMES", help="comma-separated subset of the task family"
    )
    train.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="save checkpoints (and, on the embedded broker, its data) in DIR",
    )
    train.add_argument(
        "--checkpoint-every", type=int, default=10, metavar="N", help="steps between checkpoints"
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the checkpoint in --checkpoint-dir (a new run when there is none)",
    )
    train.add_argument(
        "--max-response-length",
        type=float,
        default=5.0,
        metavar="TOKENS",
        help="alert when the mean response length passes this (default 5)",
    )


def _run(coro: Coroutine[Any, Any, int]) -> int:
    return asyncio.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rewardbus`` console script."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    from rewardbus import commands

    handlers: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
        "demo": commands.demo,
        "broker": commands.broker,
        "cluster": commands.cluster,
        "worker": commands.worker,
        "aggregator": commands.aggregator,
        "topics": commands.topics,
        "judge": commands.judge,
        "doctor": commands.doctor,
        "train-demo": commands.train_demo,
        "canary": commands.canary,
        "jaeger": commands.jaeger,
        "trace": commands.trace,
        "prometheus": commands.prometheus,
        "top": commands.top,
    }
    try:
        return _run(handlers[args.command](args))
    except KeyboardInterrupt:
        return 130
    except ShellError as exc:
        print(f"rewardbus {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
