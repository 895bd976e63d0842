"""Per-step training metrics and the two alerts users asked for.

- ``reward_falling``: the step's mean reward fell ``falling_steps`` steps in a row
  (each step strictly below the one before). It fires when the streak reaches that
  length, then re-arms: ten falls in a row are two alerts.
- ``response_length``: the step's mean response length passed
  ``max_response_length`` (tokens, ``<eos>`` included). It fires on the step that
  crosses the threshold and re-arms once the length is back at or under it, so a
  run that stays long is one alert, not one per step.

:class:`AlertMonitor` is the pure core (no clock, no I/O); :class:`AlertCounters`
records what it raises as OpenTelemetry API counters, as a library should (the
application configures the SDK, or nothing is exported).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field

from opentelemetry import metrics

__all__ = [
    "Alert",
    "AlertCounters",
    "AlertKind",
    "AlertMonitor",
    "AlertRules",
    "StepRecord",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRecord:
    """What one training step measured."""

    step: int
    reward_mean: float
    response_length: float
    reward_latency_ms: float
    rewards_per_s: float
    step_s: float
    samples: int
    masked: int = 0
    cache_hits: int = 0
    accepted: int = 0
    loss: float = 0.0
    grad_norm: float = 0.0
    clip_fraction: float = 0.0
    approx_kl: float = 0.0


class AlertKind(enum.StrEnum):
    """The alerts the monitor raises."""

    REWARD_FALLING = "reward_falling"
    RESPONSE_LENGTH = "response_length"


@dataclass(frozen=True)
class Alert:
    """One alert, raised at ``step``."""

    kind: AlertKind
    step: int
    message: str


@dataclass(frozen=True)
class AlertRules:
    """When the alerts fire."""

    falling_steps: int = 5
    max_response_length: float = 5.0

    def __post_init__(self) -> None:
        if self.falling_steps < 1:
            raise ValueError("falling_steps must be at least 1")


@dataclass
class AlertMonitor:
    """Watches step records in order and says which alerts each one raises."""

    rules: AlertRules = field(default_factory=AlertRules)
    counts: dict[AlertKind, int] = field(default_factory=lambda: dict.fromkeys(AlertKind, 0))
    _previous_reward: float | None = None
    _falling: int = 0
    _too_long: bool = False

    def observe(self, record: StepRecord) -> list[Alert]:
        """The alerts ``record`` raises (most steps: none)."""
        alerts = [a for a in (self._reward(record), self._length(record)) if a is not None]
        for alert in alerts:
            self.counts[alert.kind] += 1
        return alerts

    def _reward(self, record: StepRecord) -> Alert | None:
        previous, self._previous_reward = self._previous_reward, record.reward_mean
        fell = previous is not None and record.reward_mean < previous
        self._falling = self._falling + 1 if fell else 0
        if self._falling < self.rules.falling_steps:
            return None
        self._falling = 0
        return Alert(
            AlertKind.REWARD_FALLING,
            record.step,
            f"mean reward fell {self.rules.falling_steps} steps in a row "
            f"(now {record.reward_mean:.3f})",
        )

    def _length(self, record: StepRecord) -> Alert | None:
        above = record.response_length > self.rules.max_response_length
        crossed = above and not self._too_long
        self._too_long = above
        if not crossed:
            return None
        return Alert(
            AlertKind.RESPONSE_LENGTH,
            record.step,
            f"mean response length {record.response_length:.2f} tokens passed "
            f"{self.rules.max_response_length:g}",
        )


class AlertCounters:
    """Alerts logged and counted (``rewardbus.train_demo.alerts``, attribute ``alert``)."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter(__name__)
        self._alerts = meter.create_counter(
            "rewardbus.train_demo.alerts", unit="{alert}", description="train-demo alerts raised"
        )
        self._steps = meter.create_counter(
            "rewardbus.train_demo.steps", unit="{step}", description="train-demo steps finished"
        )

    def record(self, record: StepRecord, alerts: list[Alert]) -> None:
        """Count the step and its alerts; log each alert."""
        self._steps.add(1)
        for alert in alerts:
            log.warning("train-demo alert %s at step %d: %s", alert.kind, alert.step, alert.message)
            self._alerts.add(1, {"alert": alert.kind.value})
