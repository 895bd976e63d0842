"""``rewardbus top``'s pure part: two snapshots of the metrics in, one text frame out.

No I/O and no clock: :mod:`rewardbus.observability.top` fetches the snapshots (from
``/metrics`` endpoints or from Prometheus) and passes the time between them. A
snapshot is a list of :class:`Series` — Prometheus names and labels, as exposed
(docs/metrics.md) — so both sources feed the same arithmetic.

Rates are the counters' growth between the snapshots; latency percentiles come from
the histogram buckets that grew in between (or, when none did, from every
observation so far, and the frame says so).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Frame", "Series", "WorkerRow", "build_frame", "quantile", "render"]

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

    p50, p99, windowed = _latency(prior, after)
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
    )


def _latency(
    before: Sequence[Series] | None, after: Sequence[Series]
) -> tuple[float | None, float | None, bool]:
    now = _buckets(after, LATENCY)
    if before is not None:
        then = _buckets(before, LATENCY)
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


def _num(value: float | None, fmt: str = "{:.1f}", missing: str = "-") -> str:
    return missing if value is None else fmt.format(value)


def _bar(fraction: float, width: int) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "#" * filled + "." * (width - filled)


def render(frame: Frame, *, width: int = 80) -> str:
    """The frame as plain text lines (no terminal control codes)."""
    window = f"last {frame.window_s:.1f} s" if frame.window_s else "one snapshot"
    lines = [
        f"rewardbus top - {window} - {len(frame.sources)} source(s)",
        "",
        f"completions/s  {_num(frame.completions_per_s):>8}   total {frame.completions_total:,.0f}",
        f"latency (produce->reward)  p50 {_num(frame.p50_ms, '{:.0f}')} ms   "
        f"p99 {_num(frame.p99_ms, '{:.0f}')} ms"
        + ("" if frame.latency_windowed else "   (all observations so far)"),
        f"cache hit rate {_num(frame.cache_hit_rate, '{:.1%}')}",
        f"scored batches/s {_num(frame.batches_per_s, '{:.2f}')}   "
        f"last batch reward mean {_num(frame.reward_mean, '{:.3f}')}",
        "",
        *_verdict_lines(frame.verdicts, width),
        "",
        *_lag_lines(frame.lags),
        "",
        *_worker_lines(frame.workers, width),
    ]
    for error in frame.errors:
        lines.append(f"! {error}")
    return "\n".join(line[:width] for line in lines) + "\n"


def _verdict_lines(verdicts: Mapping[str, float], width: int) -> list[str]:
    total = sum(verdicts.values())
    if not total:
        return ["verdicts       (none yet)"]
    bar_width = max(10, width - 40)
    lines = ["verdicts (since start)"]
    for verdict, count in sorted(verdicts.items(), key=lambda kv: (-kv[1], kv[0])):
        share = count / total
        lines.append(f"  {verdict:<15} {count:>8,.0f} {share * 100:5.1f}% {_bar(share, bar_width)}")
    return lines


def _lag_lines(lags: Mapping[tuple[str, str, str], float]) -> list[str]:
    if not lags:
        return ["consumer lag   (no partition fetched yet)"]
    lines = ["consumer lag (records not yet fetched)"]
    for (consumer, topic, partition), lag in sorted(lags.items(), key=_lag_order):
        lines.append(f"  {consumer:<10} {topic}[{partition}] {lag:>10,.0f}")
    return lines


def _lag_order(item: tuple[tuple[str, str, str], float]) -> tuple[str, str, int]:
    consumer, topic, partition = item[0]
    return consumer, topic, int(partition) if partition.isdigit() else -1


def _worker_lines(workers: Sequence[WorkerRow], width: int) -> list[str]:
    if not workers:
        return ["workers        (none reporting)"]
    bar_width = max(10, width - 60)
    lines = [f"  {'worker':<24} {'compl/s':>8} {'busy':>9} {'util':>6}"]
    for row in workers:
        busy = f"{row.in_flight:.0f}/{row.concurrency:.0f}"
        lines.append(
            f"  {row.worker_id[:24]:<24} {_num(row.completions_per_s):>8} {busy:>9} "
            f"{row.utilisation * 100:5.1f}% {_bar(row.utilisation, bar_width)}"
        )
    return lines
