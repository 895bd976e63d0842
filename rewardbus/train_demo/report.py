"""The train demo's output: the per-step progress line, the summary object and the plot."""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rewardbus.observability.percentiles import Percentiles
from rewardbus.train_demo.monitor import AlertKind, StepRecord
from rewardbus.train_demo.plot import Series, plot_curves

__all__ = [
    "RunFacts",
    "TrainSummary",
    "curve_series",
    "print_summary",
    "resume_markers",
    "step_line",
    "step_progress",
    "summary",
    "write_plot",
]

# The acceptance bar the demo is held to (issue 8): from <= 0.2 to >= 0.8.
FIRST_AT_MOST = 0.2
LAST_AT_LEAST = 0.8


def step_line(record: StepRecord, total_steps: int) -> str:
    """``step 12/100  reward 0.431  len 3.12  latency 412 ms  311 rewards/s  ...``."""
    return (
        f"step {record.step + 1}/{total_steps}  reward {record.reward_mean:.3f}  "
        f"len {record.response_length:.2f}  latency {record.reward_latency_ms:.0f} ms  "
        f"{record.rewards_per_s:.0f} rewards/s  cache {record.cache_hits}/{record.samples}  "
        f"step {record.step_s:.2f} s"
    )


@contextlib.contextmanager
def step_progress(total_steps: int, first_step: int) -> Iterator[Callable[[StepRecord], None]]:
    """Report each step: its line on stderr, kept as the run's log; on a terminal, a
    ``rich`` progress bar of the steps stays below the lines."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("steps"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    task = bar.add_task("steps", total=total_steps, completed=first_step)

    def report(record: StepRecord) -> None:
        say(step_line(record, total_steps))  # above the bar: rich redirects stderr while live
        bar.update(task, completed=record.step + 1)

    with bar:
        yield report


@dataclass(frozen=True)
class RunFacts:
    """What the summary reports besides the step records."""

    steps_requested: int
    window: int
    wall_s: float
    train_s: float
    device: str
    workers: int
    strict: bool
    group_size: int
    tasks: Sequence[str]
    plot: Path | None
    alerts: dict[AlertKind, int]
    verdicts: Counter[str]
    policy_parameters: int
    error: str | None = None
    # Steps at which a resumed process took over; batches of a killed one it skipped.
    resumed_at: Sequence[int] = ()
    skipped_batches: int = 0


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class TrainSummary:
    """What the train demo found; printed as lines, and as one JSON object with ``--json``."""

    steps: int
    steps_requested: int
    window: int
    reward_mean_first: float
    reward_mean_last: float
    reward_mean_by_step: list[float]
    response_length_by_step: list[float]
    reward_latency_ms_by_step: list[float]
    rewards_per_s_by_step: list[float]
    reward_latency_ms: Percentiles
    wall_s: float
    train_s: float
    steps_per_s: float
    rewards: int
    rewards_per_s: float
    cache_hits: int
    masked: int
    verdicts: dict[str, int]
    alerts: dict[str, int]
    device: str
    workers: int
    strict_sandbox: bool
    group_size: int
    tasks: list[str]
    policy_parameters: int
    plot: str | None
    resumed_at: list[int]
    skipped_batches: int
    error: str | None

    @property
    def learned(self) -> bool:
        """The acceptance bar: the first window at most 0.2, the last at least 0.8."""
        return self.reward_mean_first <= FIRST_AT_MOST and self.reward_mean_last >= LAST_AT_LEAST

    @property
    def improved(self) -> bool:
        """The last window's mean reward above the first's."""
        return self.reward_mean_last > self.reward_mean_first

    def to_json(self) -> dict[str, Any]:
        """The fields and ``learned``, as JSON-ready values."""
        return {**asdict(self), "learned": self.learned}


def summary(records: Sequence[StepRecord], facts: RunFacts) -> TrainSummary:
    """The run's summary."""
    rewards = [r.reward_mean for r in records]
    window = max(1, min(facts.window, len(records)))
    first, last = _mean(rewards[:window]), _mean(rewards[-window:])
    latencies = [r.reward_latency_ms for r in records]
    samples = sum(r.samples for r in records)
    train_s = max(facts.train_s, 1e-9)
    return TrainSummary(
        steps=len(records),
        steps_requested=facts.steps_requested,
        window=window,
        reward_mean_first=round(first, 4),
        reward_mean_last=round(last, 4),
        reward_mean_by_step=[round(v, 4) for v in rewards],
        response_length_by_step=[round(r.response_length, 3) for r in records],
        reward_latency_ms_by_step=[round(v, 1) for v in latencies],
        rewards_per_s_by_step=[round(r.rewards_per_s, 1) for r in records],
        reward_latency_ms=Percentiles.of(latencies),
        wall_s=round(facts.wall_s, 2),
        train_s=round(facts.train_s, 2),
        steps_per_s=round(len(records) / train_s, 3),
        rewards=samples,
        rewards_per_s=round(samples / train_s, 1),
        cache_hits=sum(r.cache_hits for r in records),
        masked=sum(r.masked for r in records),
        verdicts=dict(sorted(facts.verdicts.items())),
        alerts={kind.value: count for kind, count in facts.alerts.items()},
        device=facts.device,
        workers=facts.workers,
        strict_sandbox=facts.strict,
        group_size=facts.group_size,
        tasks=list(facts.tasks),
        policy_parameters=facts.policy_parameters,
        plot=str(facts.plot) if facts.plot is not None else None,
        resumed_at=list(facts.resumed_at),
        skipped_batches=facts.skipped_batches,
        error=facts.error,
    )


def print_summary(result: TrainSummary, *, as_json: bool) -> None:
    """A human summary on stdout; with ``as_json`` the summary object as the last line."""
    mode = "strict" if result.strict_sandbox else "DEGRADED allowed"
    lines = [
        "",
        "rewardbus train-demo — GRPO on a tiny policy, every reward from the sandbox pipeline",
        f"  steps             {result.steps}/{result.steps_requested} on {result.device}"
        f" in {result.train_s} s ({result.steps_per_s} steps/s; {result.wall_s} s"
        " with start-up)",
        f"  mean reward       first {result.window} steps {result.reward_mean_first}"
        f"  ->  last {result.window} steps {result.reward_mean_last}",
        f"  rewards           {result.rewards} from {result.workers} sandbox worker"
        f" processes ({mode}), {result.rewards_per_s}/s, {result.cache_hits} cache hits,"
        f" {result.masked} masked",
        f"  reward latency    p50 {result.reward_latency_ms.p50} ms"
        f"   p99 {result.reward_latency_ms.p99} ms",
        f"  verdicts          {result.verdicts}",
        f"  alerts            {result.alerts}",
        f"  plot              {result.plot}",
        *(
            [
                f"  resumed           at step {result.resumed_at},"
                f" {result.skipped_batches} batches of the killed process skipped"
            ]
            if result.resumed_at
            else []
        ),
        f"  result            {'LEARNED' if result.learned else 'did not reach the bar'}"
        f" (first <= {FIRST_AT_MOST}, last >= {LAST_AT_LEAST})",
    ]
    if result.error:
        lines.append(f"  error             {result.error}")
    print("\n".join(lines), flush=True)
    if as_json:
        print(json.dumps(result.to_json(), sort_keys=True), flush=True)


def write_plot(
    path: Path, records: Sequence[StepRecord], *, title: str, resumed_at: Sequence[int] = ()
) -> Path:
    """The four curves as a PNG at ``path``; a marked line at each step a resume began."""
    return plot_curves(path, curve_series(records), title=title, markers=resume_markers(resumed_at))


def curve_series(records: Sequence[StepRecord]) -> list[Series]:
    """The plotted curves: mean reward (with the acceptance bar), response length,
    reward latency and throughput, a value per step."""
    return [
        Series(
            "mean reward",
            [r.reward_mean for r in records],
            "tab:blue",
            fixed_range=(0.0, 1.0),
            guides=((FIRST_AT_MOST, f"{FIRST_AT_MOST}"), (LAST_AT_LEAST, f"{LAST_AT_LEAST}")),
        ),
        Series(
            "mean response length",
            [r.response_length for r in records],
            "tab:orange",
            unit=" tok",
        ),
        Series(
            "reward latency (publish -> scored batch)",
            [r.reward_latency_ms for r in records],
            "tab:green",
            unit=" ms",
        ),
        Series(
            "throughput (rewards / reward latency)",
            [r.rewards_per_s for r in records],
            "tab:purple",
            unit=" /s",
        ),
    ]


def resume_markers(resumed_at: Sequence[int]) -> list[tuple[int, str]]:
    """A "resumed" line at each step a resumed run began."""
    return [(step, "resumed") for step in resumed_at]


def say(message: str) -> None:
    """A progress message on stderr."""
    print(f"rewardbus train-demo: {message}", file=sys.stderr, flush=True)
