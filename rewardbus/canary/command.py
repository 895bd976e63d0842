"""``rewardbus canary``: the canary loop as its own process (options in, exit status out).

Its own process, not an option of the aggregator or a worker: it is a prober of
the whole judging path, one per deployment, started and scaled apart from the
trainers' learners; it must keep probing while a learner restarts, and a canary
loop that stalls must not stall aggregation.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rewardbus.canary.golden import load_golden
from rewardbus.canary.loop import CanaryConfig, CanaryOutcome, CanaryStats, run_canaries
from rewardbus.errors import UsageError
from schemas import KafkaSettings

__all__ = ["CanaryOptions", "print_outcome", "print_summary", "run_command"]


@dataclass(frozen=True)
class CanaryOptions:
    """What ``rewardbus canary`` was asked to do, parsed once at the CLI."""

    # A directory of golden-set TOML files (None: the shipped set).
    golden: Path | None = None
    # Only these languages' canaries (empty: all of them).
    languages: tuple[str, ...] = ()
    rate_per_s: float = 0.2
    max_in_flight: int = 8
    answer_timeout_s: float = 180.0
    # Passes over the set, then exit (None: until stopped).
    rounds: int | None = None


async def run_command(
    options: CanaryOptions, kafka: KafkaSettings, *, shutdown: Awaitable[None]
) -> int:
    """Run the loop as ``options`` say; 0 when every canary answered matched, 1 otherwise.

    Raises :class:`~rewardbus.canary.GoldenSetError` (a usage error) for a golden set
    that does not load, and a plain :class:`~rewardbus.errors.UsageError` when the
    languages select no canary.
    """
    canaries = load_golden(options.golden, languages=options.languages or None)
    if not canaries:
        raise UsageError("no canaries selected")
    config = CanaryConfig(
        rate_per_s=options.rate_per_s,
        max_in_flight=options.max_in_flight,
        answer_timeout_s=options.answer_timeout_s,
        rounds=options.rounds,
    )
    print(
        f"rewardbus canary: {len(canaries)} canaries at {config.rate_per_s:g}/s, "
        f"batch id {config.batch_id}",
        file=sys.stderr,
        flush=True,
    )

    def show(outcome: CanaryOutcome) -> None:
        print_outcome(outcome, sys.stdout)

    stats = await run_canaries(kafka, canaries, config, shutdown=shutdown, on_outcome=show)
    print_summary(stats, sys.stdout)
    return 0 if stats.mismatched == 0 and stats.unanswered == 0 else 1


def print_outcome(outcome: CanaryOutcome, out: TextIO) -> None:
    """One line per judged canary: ok / MISMATCH / UNANSWERED, name, verdicts, worker."""
    canary, event = outcome.canary, outcome.event
    if event is None:
        out.write(f"UNANSWERED {canary.full_name}: {outcome.error}\n")
    elif outcome.mismatch is None:
        out.write(
            f"ok         {canary.full_name}: {event.verdict.value} {event.score:.3g}"
            f" (worker {event.worker_id})\n"
        )
    else:
        out.write(f"MISMATCH   {canary.full_name}: {outcome.mismatch.reason}\n")
    out.flush()


def print_summary(stats: CanaryStats, out: TextIO) -> None:
    """The totals, last."""
    out.write(
        f"canaries sent {stats.sent}: {stats.matched} matched, {stats.mismatched} mismatched,"
        f" {stats.unanswered} unanswered\n"
    )
    out.flush()
