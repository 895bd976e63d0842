"""``rewardbus trace SAMPLE_ID`` / ``--batch BATCH_ID``: a waterfall from Jaeger's API."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping

from rewardbus.cli.common import Subcommands
from rewardbus.errors import CommandFailed, UsageError

__all__ = ["ENV_JAEGER_URL", "add_parser", "run"]

ENV_JAEGER_URL = "REWARDBUS_JAEGER_URL"


def add_parser(sub: Subcommands) -> None:
    """The command's flags."""
    trace = sub.add_parser(
        "trace", help="one sample's (or batch's) trace from Jaeger, as a waterfall"
    )
    trace.add_argument("sample_id", nargs="?", help="the sample to show")
    trace.add_argument("--batch", metavar="BATCH_ID", help="show a scored batch and its samples")
    trace.add_argument("--json", action="store_true", help="print the span tree as JSON")
    trace.add_argument(
        "--jaeger-url",
        default=None,
        help=f"Jaeger query service (env {ENV_JAEGER_URL}; default http://127.0.0.1:16686)",
    )
    trace.add_argument(
        "--lookback", type=float, default=86_400.0, metavar="S", help="search this far back"
    )
    trace.add_argument(
        "--wait", type=float, default=5.0, metavar="S", help="wait this long for late spans"
    )
    trace.add_argument("--width", type=int, default=40, help="bar width in characters")
    trace.set_defaults(run=run)


async def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Print the waterfall (or the JSON tree); 1 when Jaeger has no such trace."""
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
    url = args.jaeger_url or env.get(ENV_JAEGER_URL) or DEFAULT_QUERY_URL
    query = JaegerQuery(url)
    # Colours on a terminal; plain text (no control codes, rows never cut) in a pipe.
    style = WaterfallStyle(bar_width=max(10, args.width), terminal=sys.stdout.isatty())

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
