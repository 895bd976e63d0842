"""Topic names, with a configurable prefix so several trainers can share a cluster."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Topics"]


@dataclass(frozen=True)
class Topics:
    """The topic names of one rewardbus deployment.

    >>> Topics(prefix="exp1.").completions
    'exp1.rollouts.completions'
    """

    prefix: str = ""

    @property
    def completions(self) -> str:
        return f"{self.prefix}rollouts.completions"

    @property
    def rewards(self) -> str:
        return f"{self.prefix}rollouts.rewards"

    @property
    def manifests(self) -> str:
        return f"{self.prefix}rollouts.manifests"

    @property
    def scored(self) -> str:
        return f"{self.prefix}rollouts.scored"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}rollouts.dlq"

    @property
    def problems(self) -> str:
        return f"{self.prefix}rewardbus.problems"

    @property
    def result_cache(self) -> str:
        return f"{self.prefix}rewardbus.result-cache"

    @property
    def aggregator_state(self) -> str:
        return f"{self.prefix}rewardbus.aggregator-state"

    def all(self) -> tuple[str, ...]:
        """Every topic, in creation order."""
        return (
            self.completions,
            self.rewards,
            self.manifests,
            self.scored,
            self.dlq,
            self.problems,
            self.aggregator_state,
            self.result_cache,
        )
