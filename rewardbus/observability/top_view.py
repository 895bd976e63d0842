"""``rewardbus top``'s pure part: two snapshots of the metrics in, one frame out.

No I/O and no clock: :mod:`rewardbus.observability.top` fetches the snapshots (from
``/metrics`` endpoints or from Prometheus) and passes the time between them. A
snapshot is a list of :class:`Series` — Prometheus names and labels, as exposed
(docs/metrics.md) — so both sources feed the same arithmetic.

Rates are the counters' growth between the snapshots; latency percentiles come from
the histogram buckets that grew in between (or, when none did, from every
observation so far, and the frame says so). The frame is drawn with ``rich``
tables (:func:`frame_view`); :func:`render` makes it text, plain or coloured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rich import box
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rewardbus.observability.console import render_text

__all__ = ["Frame", "Series", "WorkerRow", "build_frame", "frame_view", "quantile", "render"]

COMPLETIONS = "rewardbus_worker_completions_total"
REWARDS = "rewardbus_worker_rewards_total"
CACHE_HITS = "rewardbus_worker_cache_hits_total"
LATENCY = "rewardbus_worker_reward_latency_milliseconds_bucket"
UTILISATION = "rewardbus_worker_utilisation"
EXEC_TIME = "rewardbus_worker_execution_milliseconds_sum"
IN_FLIGHT = "rewardbus_worker_in_flight"
CONCURRENCY = "rewardbus_worker_concurrency"
WORKER_LAG = "rewardbus_worker_consumer_lag"
AGGREGATOR_LAG = "rewardbus_aggregator_consumer_lag"
BATCHES = "rewardbus_aggregator_batches_total"
REWARD_MEAN = "rewardbus_aggregator_reward_mean"
TOOL_CALLS = "rewardbus_tools_calls_total"
TOOL_EXEC = "rewardbus_tools_execution_milliseconds_bucket"
TOOL_SESSIONS = "rewardbus_tools_sessions"
TOOL_MEMORY = "rewardbus_tools_session_memory_bytes"
TOOL_REBUILDS = "rewardbus_tools_rebuilds_total"
TOOL_EVICTIONS = "rewardbus_tools_evictions_total"
TOOL_LAG = "rewardbus_tools_consumer_lag"


@dataclass(frozen=True, slots=True)
class Series:
    """One exposed sample: a Prometheus metric name, its labels, its value."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker's line of the frame."""

    worker_id: str
    completions_per_s: float | None
    in_flight: float
    concurrency: float
    utilisation: float


@dataclass(frozen=True, slots=True)
class ToolsRow:
    """The tool service of every worker together (multi-turn tool calls)."""

    calls_per_s: float | None
    calls_total: float
    exec_p50_ms: float | None
    exec_p99_ms: float | None
    statuses: Mapping[str, float]
    sessions: float
    session_memory_mb: float
    rebuilds: Mapping[str, float]
    evictions: float


@dataclass(frozen=True)
class Frame:
    """Everything one screen shows."""

    window_s: float | None
    completions_per_s: float | None
    completions_total: float
    p50_ms: float | None
    p99_ms: float | None
    latency_windowed: bool
    verdicts: Mapping[str, float]
    cache_hit_rate: float | None
    lags: Mapping[tuple[str, str, str], float]  # (consumer, topic, partition) -> records
    workers: Sequence[WorkerRow]
    batches_per_s: float | None
    reward_mean: float | None
    sources: Sequence[str] = field(default_factory=tuple)
    errors: Sequence[str] = field(default_factory=tuple)
    tools: ToolsRow | None = None  # None: no worker reports a tool service


def _sum(series: Iterable[Series], name: str, **match: str) -> float:
    return sum(
        s.value
        for s in series
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
    )


def _by(series: Iterable[Series], name: str, label: str) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for s in series:
        if s.name == name:
            totals[s.labels.get(label, "")] += s.value
    return dict(totals)


def _buckets(series: Iterable[Series], name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over every series of ``name``."""
    counts: dict[float, float] = defaultdict(float)
    for s in series:
        if s.name == name and "le" in s.labels:
            counts[float(s.labels["le"])] += s.value
    return dict(counts)


def quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """``histogram_quantile`` over cumulative buckets (linear within a bucket, as
    Prometheus does); None without observations."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    total = buckets[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):  # beyond the last finite bound: report that bound
                return lower
            inside = count - below
            fraction = (rank - below) / inside if inside > 0 else 1.0
            return lower + (bound - lower) * fraction
        lower, below = bound, count
    return lower


def _rate(after: float, before: float | None, window_s: float | None) -> float | None:
    if before is None or not window_s:
        return None
    return max(0.0, after - before) / window_s  # a restart resets a counter: not negative


def build_frame(
    before: Sequence[Series] | None,
    after: Sequence[Series],
    window_s: float | None,
    *,
    sources: Sequence[str] = (),
    errors: Sequence[str] = (),
) -> Frame:
    """The frame for the change from ``before`` to ``after``, ``window_s`` apart."""
    prior = before if before is not None else None

    def rate(name: str) -> float | None:
        return _rate(_sum(after, name), None if prior is None else _sum(prior, name), window_s)

    p50, p99, windowed = _latency(prior, after, LATENCY)
    rewards = _sum(after, REWARDS)
    return Frame(
        window_s=window_s,
        completions_per_s=rate(COMPLETIONS),
        completions_total=_sum(after, COMPLETIONS),
        p50_ms=p50,
        p99_ms=p99,
        latency_windowed=windowed,
        verdicts=_by(after, REWARDS, "verdict"),
        cache_hit_rate=_sum(after, CACHE_HITS) / rewards if rewards else None,
        lags=_lags(after),
        workers=_workers(prior, after, window_s),
        batches_per_s=rate(BATCHES),
        reward_mean=_mean_of(after, REWARD_MEAN),
        sources=tuple(sources),
        errors=tuple(errors),
        tools=_tools(prior, after, window_s),
    )


def _tools(
    before: Sequence[Series] | None, after: Sequence[Series], window_s: float | None
) -> ToolsRow | None:
    if not any(s.name == TOOL_SESSIONS for s in after):
        return None
    total = _sum(after, TOOL_CALLS)
    p50, p99, _ = _latency(before, after, TOOL_EXEC)
    return ToolsRow(
        calls_per_s=_rate(total, None if before is None else _sum(before, TOOL_CALLS), window_s),
        calls_total=total,
        exec_p50_ms=p50,
        exec_p99_ms=p99,
        statuses=_by(after, TOOL_CALLS, "status"),
        sessions=_sum(after, TOOL_SESSIONS),
        session_memory_mb=_sum(after, TOOL_MEMORY) / (1 << 20),
        rebuilds=_by(after, TOOL_REBUILDS, "reason"),
        evictions=_sum(after, TOOL_EVICTIONS),
    )


def _latency(
    before: Sequence[Series] | None, after: Sequence[Series], name: str
) -> tuple[float | None, float | None, bool]:
    now = _buckets(after, name)
    if before is not None:
        then = _buckets(before, name)
        grown = {le: count - then.get(le, 0.0) for le, count in now.items()}
        if grown and max(grown.values()) > 0:
            return quantile(0.5, grown), quantile(0.99, grown), True
    return quantile(0.5, now), quantile(0.99, now), False


def _lags(after: Sequence[Series]) -> dict[tuple[str, str, str], float]:
    lags: dict[tuple[str, str, str], float] = {}
    for s in after:
        if s.name == WORKER_LAG:
            consumer = "workers"
        elif s.name == AGGREGATOR_LAG:
            consumer = "aggregator"
        elif s.name == TOOL_LAG:
            consumer = "tools"
        else:
            continue
        key = (consumer, s.labels.get("topic", "?"), s.labels.get("partition", "?"))
        lags[key] = lags.get(key, 0.0) + s.value
    return lags


def _workers(
    before: Sequence[Series] | None, after: Sequence[Series], window_s: float | None
) -> list[WorkerRow]:
    done_now = _by(after, COMPLETIONS, "worker_id")
    done_then = _by(before, COMPLETIONS, "worker_id") if before is not None else None
    in_flight = _by(after, IN_FLIGHT, "worker_id")
    slots = _by(after, CONCURRENCY, "worker_id")
    busy = _busy_fraction(before, after, window_s, slots)
    ids = sorted(set(slots) | set(done_now))
    return [
        WorkerRow(
            worker_id=worker,
            completions_per_s=_rate(
                done_now.get(worker, 0.0),
                None if done_then is None else done_then.get(worker, 0.0),
                window_s,
            ),
            in_flight=in_flight.get(worker, 0.0),
            concurrency=slots.get(worker, 0.0),
            utilisation=busy.get(worker, 0.0),
        )
        for worker in ids
    ]


def _busy_fraction(
    before: Sequence[Series] | None,
    after: Sequence[Series],
    window_s: float | None,
    slots: Mapping[str, float],
) -> dict[str, float]:
    """Share of each worker's slots that executed during the window: execution time
    grown over window x slots. The instantaneous gauge is all-or-nothing at the
    moment of a scrape, so it is the fallback only (a single snapshot)."""
    if before is None or not window_s:
        return _by(after, UTILISATION, "worker_id")
    now, then = _by(after, EXEC_TIME, "worker_id"), _by(before, EXEC_TIME, "worker_id")
    seconds = {w: max(0.0, now.get(w, 0.0) - then.get(w, 0.0)) / 1000 for w in slots}
    return {w: min(1.0, seconds[w] / window_s / n) for w, n in slots.items() if n > 0}


def _mean_of(series: Sequence[Series], name: str) -> float | None:
    values = [s.value for s in series if s.name == name]
    return sum(values) / len(values) if values else None


# -- rendering -------------------------------------------------------------------------

_BAR_WIDTH = 20
_VERDICT_COLOURS = {"accepted": "green", "wrong_answer": "yellow"}


def render(frame: Frame, *, width: int = 80, terminal: bool = False) -> str:
    """The frame as text at most ``width`` columns wide: plain (no terminal control
    codes), or with colours for a terminal."""
    return render_text(frame_view(frame), terminal=terminal, width=width) + "\n"


def frame_view(frame: Frame) -> RenderableType:
    """The frame as a ``rich`` renderable: the headline figures, then verdicts, consumer
    lag and workers as tables, then a line per source that did not answer."""
    window = f"last {frame.window_s:.1f} s" if frame.window_s else "one snapshot"
    parts: list[RenderableType] = [
        Text(f"rewardbus top - {window} - {len(frame.sources)} source(s)", style="bold"),
        Text(),
        _headline(frame),
        Text(),
        _verdict_table(frame.verdicts),
        Text(),
        _lag_table(frame.lags),
        Text(),
        _worker_table(frame.workers),
    ]
    if frame.tools is not None:
        parts.extend([Text(), _tools_table(frame.tools)])
    parts.extend(Text(f"! {error}", style="bold red") for error in frame.errors)
    return Group(*parts)


def _num(value: float | None, fmt: str = "{:.1f}", missing: str = "-") -> str:
    return missing if value is None else fmt.format(value)


def _cell(text: str, style: str = "") -> Text:
    """A cell cut with "…" when its column must give way, never wrapped."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _share(fraction: float, colour: str) -> Bar:
    return Bar(
        size=1.0, begin=0.0, end=max(0.0, min(1.0, fraction)), width=_BAR_WIDTH, color=colour
    )


def _table() -> Table:
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="dim")


def _section(title: str, table: Table) -> Group:
    return Group(Text(title, style="bold"), table)


def _headline(frame: Frame) -> Table:
    p99 = f"p99 {_num(frame.p99_ms, '{:.0f}')} ms"
    grid = Table.grid(padding=(0, 3))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    rows = [
        ("completions/s", _num(frame.completions_per_s), f"total {frame.completions_total:,.0f}"),
        (
            "latency (produce->reward)",
            f"p50 {_num(frame.p50_ms, '{:.0f}')} ms",
            p99 if frame.latency_windowed else f"{p99}   (all observations so far)",
        ),
        ("cache hit rate", _num(frame.cache_hit_rate, "{:.1%}"), ""),
        (
            "scored batches/s",
            _num(frame.batches_per_s, "{:.2f}"),
            f"last batch reward mean {_num(frame.reward_mean, '{:.3f}')}",
        ),
    ]
    for label, value, detail in rows:
        grid.add_row(label, value, _cell(detail))
    return grid


def _verdict_table(verdicts: Mapping[str, float]) -> RenderableType:
    total = sum(verdicts.values())
    if not total:
        return Text("verdicts (none yet)")
    table = _table()
    table.add_column("verdict")
    table.add_column("count", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("", width=_BAR_WIDTH)
    for verdict, count in sorted(verdicts.items(), key=lambda kv: (-kv[1], kv[0])):
        colour = _VERDICT_COLOURS.get(verdict, "red")
        share = count / total
        table.add_row(
            _cell(verdict, colour), f"{count:,.0f}", f"{share:.1%}", _share(share, colour)
        )
    return _section("verdicts (since start)", table)


def _lag_table(lags: Mapping[tuple[str, str, str], float]) -> RenderableType:
    if not lags:
        return Text("consumer lag (no partition fetched yet)")
    table = _table()
    table.add_column("consumer")
    table.add_column("partition")
    table.add_column("lag", justify="right", no_wrap=True)
    for (consumer, topic, partition), lag in sorted(lags.items(), key=_lag_order):
        table.add_row(
            _cell(consumer),
            _cell(f"{topic}[{partition}]"),
            Text(f"{lag:,.0f}", style="yellow" if lag else ""),
        )
    return _section("consumer lag (records not yet fetched)", table)


def _lag_order(item: tuple[tuple[str, str, str], float]) -> tuple[str, str, int]:
    consumer, topic, partition = item[0]
    return consumer, topic, int(partition) if partition.isdigit() else -1


def _worker_table(workers: Sequence[WorkerRow]) -> RenderableType:
    if not workers:
        return Text("workers (none reporting)")
    table = _table()
    table.add_column("worker")
    table.add_column("compl/s", justify="right", no_wrap=True)
    table.add_column("busy", justify="right", no_wrap=True)
    table.add_column("util", justify="right", no_wrap=True)
    table.add_column("", width=_BAR_WIDTH)
    for row in workers:
        colour = (
            "red" if row.utilisation >= 0.95 else "yellow" if row.utilisation >= 0.8 else "green"
        )
        table.add_row(
            _cell(row.worker_id),
            _num(row.completions_per_s),
            f"{row.in_flight:.0f}/{row.concurrency:.0f}",
            f"{row.utilisation:.1%}",
            _share(row.utilisation, colour),
        )
    return _section("workers", table)


def _tools_table(tools: ToolsRow) -> RenderableType:
    grid = Table.grid(padding=(0, 3))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    statuses = ", ".join(
        f"{status} {count:,.0f}"
        for status, count in sorted(tools.statuses.items(), key=lambda kv: (-kv[1], kv[0]))
        if count
    )
    rebuilds = ", ".join(f"{why} {n:,.0f}" for why, n in sorted(tools.rebuilds.items()) if n)
    rows = [
        ("calls/s", _num(tools.calls_per_s), f"total {tools.calls_total:,.0f}: {statuses or '-'}"),
        (
            "cell time",
            f"p50 {_num(tools.exec_p50_ms, '{:.1f}')} ms",
            f"p99 {_num(tools.exec_p99_ms, '{:.1f}')} ms",
        ),
        (
            "live sessions",
            f"{tools.sessions:,.0f}",
            f"{tools.session_memory_mb:,.0f} MB in all",
        ),
        (
            "rebuilt sessions",
            f"{sum(tools.rebuilds.values()):,.0f}",
            f"{rebuilds or '-'}; evicted {tools.evictions:,.0f}",
        ),
    ]
    for label, value, detail in rows:
        grid.add_row(label, value, _cell(detail))
    return _section("tool calls (multi-turn sessions)", grid)
