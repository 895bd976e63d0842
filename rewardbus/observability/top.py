"""``rewardbus top``: fetch metrics snapshots and redraw the frame (:mod:`.top_view`).

On a terminal the frame is redrawn in place (``rich.live.Live``); into a pipe or a
file every frame is appended as plain text.

Two sources, one shape. ``--metrics URL`` (repeatable) scrapes the services'
``/metrics`` endpoints directly: two scrapes ``interval`` apart give the rates.
``--prometheus URL`` asks a Prometheus for every ``rewardbus_*`` series now and
``window`` seconds ago (two instant queries), so a single call has rates too.
An endpoint that does not answer is named on the frame; the others still show.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.live import Live

from rewardbus.observability.prometheus import PrometheusError, query
from rewardbus.observability.top_view import Frame, Series, build_frame, frame_view, render

__all__ = ["TopOptions", "prometheus_snapshot", "run_top", "scrape"]


@dataclass(frozen=True, slots=True)
class TopOptions:
    """What ``rewardbus top`` reads and how often it redraws."""

    metrics_urls: tuple[str, ...] = ()
    prometheus_url: str | None = None
    interval_s: float = 2.0
    window_s: float = 30.0  # Prometheus source: the rates' look-back
    once: bool = False
    width: int = 80
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if bool(self.metrics_urls) == bool(self.prometheus_url):
            raise ValueError("give --metrics URL (one or more) or --prometheus URL")
        if self.interval_s <= 0 or self.window_s <= 0:
            raise ValueError("the interval and the window must be positive")


def scrape(url: str, *, timeout_s: float = 5.0) -> list[Series]:
    """Every sample of one ``/metrics`` endpoint (Prometheus text format)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 -- caller's http URL
        text = reply.read().decode("utf-8")
    return [
        Series(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def prometheus_snapshot(base_url: str, at: float, *, timeout_s: float = 5.0) -> list[Series]:
    """Every ``rewardbus_*`` series a Prometheus holds at time ``at``."""
    found = query(base_url, '{__name__=~"rewardbus_.+"}', at=at, timeout_s=timeout_s)
    return [
        Series(
            sample.labels.get("__name__", ""),
            {k: v for k, v in sample.labels.items() if k != "__name__"},
            sample.value,
        )
        for sample in found
    ]


async def _scrape_all(urls: Sequence[str], timeout_s: float) -> tuple[list[Series], list[str]]:
    async def one(url: str) -> list[Series] | str:
        try:
            return await asyncio.to_thread(scrape, url, timeout_s=timeout_s)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return f"{url}: {exc}"

    series: list[Series] = []
    errors: list[str] = []
    for result in await asyncio.gather(*(one(url) for url in urls)):
        if isinstance(result, str):
            errors.append(result)
        else:
            series.extend(result)
    return series, errors


async def _frame_from_endpoints(
    options: TopOptions, before: tuple[list[Series], float] | None
) -> tuple[Frame, tuple[list[Series], float]]:
    after, errors = await _scrape_all(options.metrics_urls, options.timeout_s)
    now = time.monotonic()
    window = None if before is None else now - before[1]
    frame = build_frame(
        None if before is None else before[0],
        after,
        window,
        sources=options.metrics_urls,
        errors=errors,
    )
    return frame, (after, now)


async def _frame_from_prometheus(options: TopOptions) -> Frame:
    assert options.prometheus_url is not None
    url, now = options.prometheus_url, time.time()
    errors: list[str] = []
    try:
        before, after = await asyncio.gather(
            asyncio.to_thread(
                prometheus_snapshot, url, now - options.window_s, timeout_s=options.timeout_s
            ),
            asyncio.to_thread(prometheus_snapshot, url, now, timeout_s=options.timeout_s),
        )
    except PrometheusError as exc:
        before, after, errors = [], [], [str(exc)]
    return build_frame(before, after, options.window_s, sources=(url,), errors=errors)


async def run_top(options: TopOptions, *, out: TextIO, shutdown: Awaitable[object]) -> int:
    """Draw frames until ``shutdown`` (or one frame with ``once``). 1 if no source answered."""
    stop = asyncio.ensure_future(shutdown)
    state: tuple[list[Series], float] | None = None
    try:
        with _screen(out, options) as show:
            if options.metrics_urls:  # rates need a first scrape, one interval back
                _, state = await _frame_from_endpoints(options, None)
            while True:
                if options.metrics_urls:
                    if await _stopped(stop, options.interval_s):
                        return 0
                    frame, state = await _frame_from_endpoints(options, state)
                else:
                    frame = await _frame_from_prometheus(options)
                show(frame)
                if options.once:
                    return 1 if len(frame.errors) >= len(frame.sources) else 0
                if not options.metrics_urls and await _stopped(stop, options.interval_s):
                    return 0
    finally:
        stop.cancel()


@contextlib.contextmanager
def _screen(out: TextIO, options: TopOptions) -> Iterator[Callable[[Frame], None]]:
    """Where frames go. A terminal: one screen redrawn in place (``rich.live.Live``), or
    one coloured frame with ``once``. Anything else: each frame appended as plain text."""
    terminal = out.isatty()
    if options.once or not terminal:

        def append(frame: Frame) -> None:
            out.write(render(frame, width=options.width, terminal=terminal))
            out.flush()

        yield append
        return
    width = min(options.width, Console(file=out).width)
    console = Console(file=out, width=width, highlight=False)
    with Live(console=console, auto_refresh=False, redirect_stdout=False) as live:
        yield lambda frame: live.update(frame_view(frame), refresh=True)


async def _stopped(stop: asyncio.Future[object], delay_s: float) -> bool:
    """Wait ``delay_s`` or until ``stop``; True when it is time to stop."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(stop), delay_s)
    return stop.done()
