"""The canary loop: the golden set, judged continuously by the live worker group.

Each canary is published to the completions topic like any completion, in the
canary batch id space (``schemas.canary``), and its reward comes back on this
loop's own reply topic (``consumers.RewardClient``). So the workers judge it on
exactly the path a trainer's completion takes (decode → resolve → execute →
emit), minus the result cache, which they skip for canaries, while the learner's
rewards topic and the aggregator never see it.

A reward that differs from the expectation (:func:`~rewardbus.canary.compare.compare`)
becomes a ``rewardbus.canary.mismatches`` count (with the worker id and
language), a ``canary mismatch`` event and an error status on the canary's span,
and an error log line; the alert rule in ``infra/prometheus/canary.rules.yml``
fires on the count.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.metrics import Meter
from opentelemetry.trace import Span, Status, StatusCode

from consumers.reward_client import RewardClient, RewardClientConfig
from producers import PublishError
from rewardbus.canary.compare import Mismatch, compare
from rewardbus.canary.golden import Canary
from schemas import CANARY_BATCH_PREFIX, Completion, KafkaSettings, RewardEvent

__all__ = [
    "CanaryConfig",
    "CanaryMetrics",
    "CanaryOutcome",
    "CanaryStats",
    "parse_rate",
    "run_canaries",
]

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:/\s*(s|sec|m|min|h))?\s*$")
_PER_SECOND = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 1 / 60, "min": 1 / 60, "h": 1 / 3600}


def parse_rate(text: str) -> float:
    """Canaries per second from ``0.2``, ``0.2/s``, ``12/min`` or ``30/h``.

    >>> parse_rate("0.2/s"), parse_rate("12/min"), parse_rate("36/h")
    (0.2, 0.2, 0.01)
    """
    match = _RATE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"not a positive rate: {text!r} (e.g. 0.2/s, 12/min, 30/h)")
    return float(match.group(1)) * _PER_SECOND[match.group(2)]


def _run_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class CanaryConfig:
    """How often canaries go out, how long each may take, and how many passes to make."""

    rate_per_s: float = 0.2
    max_in_flight: int = 8
    # A canary without a reward by then counts as unanswered (the time-limit canaries
    # need their limit plus the backstop; a cold compile of Go takes far longer).
    answer_timeout_s: float = 180.0
    # Passes over the golden set; None: until shutdown.
    rounds: int | None = None
    run_id: str = field(default_factory=_run_id)

    @property
    def batch_id(self) -> str:
        """The batch id every canary of this run carries (in the canary space)."""
        return f"{CANARY_BATCH_PREFIX}{self.run_id}"


@dataclass(frozen=True)
class CanaryOutcome:
    """One canary judged (``event``) or not answered in time (``event`` is None)."""

    canary: Canary
    sample_id: str
    event: RewardEvent | None
    mismatch: Mismatch | None = None
    # Why there is no event: the timeout, or the broker refusing the publish.
    error: str = ""

    @property
    def matched(self) -> bool:
        """Answered, and as a healthy judge answers."""
        return self.event is not None and self.mismatch is None


@dataclass
class CanaryStats:
    """What a canary run sent and learnt; ``failures`` keeps the latest bad outcomes."""

    sent: int = 0
    matched: int = 0
    mismatched: int = 0
    unanswered: int = 0
    failures: list[CanaryOutcome] = field(default_factory=list)
    max_failures_kept: int = 1000

    def add(self, outcome: CanaryOutcome) -> None:
        """Count ``outcome``; keep it if it is a failure (the oldest go first)."""
        if outcome.matched:
            self.matched += 1
            return
        if outcome.event is None:
            self.unanswered += 1
        else:
            self.mismatched += 1
        self.failures.append(outcome)
        del self.failures[: -self.max_failures_kept]


class CanaryMetrics:
    """The canary counters, on ``meter`` (the global meter provider's by default)."""

    def __init__(self, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter(__name__)
        self.judged = meter.create_counter(
            "rewardbus.canary.judged", description="canaries answered, by outcome"
        )
        self.mismatches = meter.create_counter(
            "rewardbus.canary.mismatches",
            description="canaries whose verdict or score differs from the golden one",
        )
        self.unanswered = meter.create_counter(
            "rewardbus.canary.unanswered", description="canaries without a reward in time"
        )

    def record(self, outcome: CanaryOutcome) -> None:
        """Count one outcome under its canary, language and (when answered) worker."""
        canary = outcome.canary
        base = {"canary": canary.full_name, "language": canary.language}
        if outcome.event is None:
            self.unanswered.add(1, base)
            return
        attrs = {**base, "worker_id": outcome.event.worker_id}
        self.judged.add(1, {**attrs, "outcome": "match" if outcome.matched else "mismatch"})
        if outcome.mismatch is not None:
            self.mismatches.add(
                1,
                {
                    **attrs,
                    "expected": outcome.mismatch.expected.value,
                    "verdict": outcome.mismatch.actual.value,
                },
            )


async def run_canaries(
    kafka: KafkaSettings,
    canaries: Sequence[Canary],
    config: CanaryConfig,
    *,
    shutdown: Awaitable[None],
    meter: Meter | None = None,
    on_outcome: Callable[[CanaryOutcome], None] | None = None,
) -> CanaryStats:
    """Send ``canaries`` round-robin at ``config.rate_per_s`` until shutdown (or the rounds end).

    Returns what was learnt. In-flight canaries are awaited when the rounds end,
    and abandoned (not counted) on shutdown.
    """
    if not canaries:
        raise ValueError("no canaries to send")
    stats = CanaryStats()
    recorder = CanaryMetrics(meter)

    def done(outcome: CanaryOutcome) -> None:
        stats.add(outcome)
        recorder.record(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    client = RewardClient(kafka, RewardClientConfig(name=f"canary-{config.run_id}"))
    async with client:
        sender = _Sender(client, config, done)
        await sender.run(_schedule(canaries, config.rounds), shutdown)
    stats.sent = sender.sent
    return stats


def _schedule(canaries: Sequence[Canary], rounds: int | None) -> Iterator[Canary]:
    if rounds is None:
        return itertools.cycle(canaries)
    return itertools.chain.from_iterable(itertools.repeat(canaries, rounds))


class _Sender:
    def __init__(
        self, client: RewardClient, config: CanaryConfig, done: Callable[[CanaryOutcome], None]
    ) -> None:
        self._client = client
        self._config = config
        self._done = done
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0

    async def run(self, schedule: Iterator[Canary], shutdown: Awaitable[None]) -> None:
        stop = asyncio.ensure_future(shutdown)
        interval = 1.0 / self._config.rate_per_s
        started = time.monotonic()
        try:
            for sequence, canary in enumerate(schedule):
                # Ticks are fixed in time: a slow answer delays no later canary's send.
                delay = started + sequence * interval - time.monotonic()
                if await _stopped(stop, delay) or await self._slot(stop):
                    break
                task = asyncio.create_task(self._judge(sequence, canary))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                self.sent += 1
            # The rounds are over: wait for the answers still out (or for shutdown).
            while self._tasks and not stop.done():
                waiters: list[asyncio.Future[None]] = [stop, *self._tasks]
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            left = list(self._tasks)
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
            if stop is not shutdown:  # our own wrapper, not the caller's future
                stop.cancel()

    async def _slot(self, stop: asyncio.Future[None]) -> bool:
        """Wait for an in-flight slot; True if shutdown came first."""
        acquire = asyncio.ensure_future(self._slots.acquire())
        waiters: list[asyncio.Future[Any]] = [acquire, stop]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if acquire.done():
            if stop.done():
                self._slots.release()
                return True
            return False
        acquire.cancel()
        return True

    async def _judge(self, sequence: int, canary: Canary) -> None:
        try:
            sample_id = f"{self._config.batch_id}-{sequence:06d}"
            outcome = await _judge_one(self._client, canary, sample_id, self._config)
            self._done(outcome)
        finally:
            self._slots.release()


async def _stopped(stop: asyncio.Future[None], delay: float) -> bool:
    """Wait ``delay`` seconds (the rate's tick) unless shutdown comes first; True if it did."""
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(stop), timeout=delay)
    return stop.done()


async def _judge_one(
    client: RewardClient, canary: Canary, sample_id: str, config: CanaryConfig
) -> CanaryOutcome:
    completion = Completion(
        sample_id=sample_id,
        batch_id=config.batch_id,
        group_id=config.batch_id,
        language=canary.language,
        code=canary.code,
        tests=canary.tests,
        limits=canary.limits,
        attributes={"rewardbus.canary": canary.full_name},
    )
    attributes: dict[str, str | float] = {
        "rewardbus.canary.name": canary.full_name,
        "rewardbus.canary.kind": canary.kind.value,
        "rewardbus.canary.expected_verdict": canary.expect.value,
        "rewardbus.language": canary.language,
        "rewardbus.sample_id": sample_id,
        "rewardbus.batch_id": config.batch_id,
    }
    if canary.score is not None:
        attributes["rewardbus.canary.expected_score"] = canary.score
    with tracer.start_as_current_span("judge canary", attributes=attributes) as span:
        try:
            event = await client.score(completion, None, timeout_s=config.answer_timeout_s)
        except TimeoutError:
            error = f"no reward within {config.answer_timeout_s:g} s"
            outcome = CanaryOutcome(canary, sample_id, None, error=error)
        except PublishError as exc:  # the next tick tries again; the broker may be back
            outcome = CanaryOutcome(canary, sample_id, None, error=f"publish failed: {exc.reason}")
        else:
            outcome = CanaryOutcome(canary, sample_id, event, compare(canary, event))
        _annotate(span, outcome)
    return outcome


def _annotate(span: Span, outcome: CanaryOutcome) -> None:
    canary, event, mismatch = outcome.canary, outcome.event, outcome.mismatch
    if event is None:
        span.add_event("canary unanswered", {"rewardbus.language": canary.language})
        span.set_status(Status(StatusCode.ERROR, outcome.error))
        log.error("canary %s (%s): %s", canary.full_name, outcome.sample_id, outcome.error)
        return
    span.set_attribute("rewardbus.verdict", event.verdict.value)
    span.set_attribute("rewardbus.score", event.score)
    span.set_attribute("rewardbus.worker_id", event.worker_id)
    span.set_attribute("rewardbus.canary.match", mismatch is None)
    if mismatch is None:
        return
    span.add_event(
        "canary mismatch",
        {
            "rewardbus.worker_id": event.worker_id,
            "rewardbus.language": canary.language,
            "rewardbus.canary.expected_verdict": mismatch.expected.value,
            "rewardbus.verdict": mismatch.actual.value,
            "rewardbus.score": mismatch.actual_score,
        },
    )
    span.set_status(Status(StatusCode.ERROR, f"canary mismatch: {mismatch.reason}"))
    log.error(
        "canary %s (%s) misjudged: %s; message %r",
        canary.full_name,
        outcome.sample_id,
        mismatch.reason,
        event.message[:200],
    )
