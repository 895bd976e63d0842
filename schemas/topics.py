"""Topic names, with a configurable prefix so several trainers can share a cluster."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_RECORD_BYTES", "Topics"]


# The largest record rewardbus writes or accepts: CodeContests-sized test suites are
# megabytes, so the topics that carry them (completions, problems, and the DLQ, which
# keeps a failed completion's bytes) take records up to this size (Kafka's default is
# about 1 MiB), and every producer of them may send requests this large.
MAX_RECORD_BYTES = 16 << 20


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

    @property
    def attempts(self) -> str:
        """Compacted: how often each completion record was started (the quarantine ledger)."""
        return f"{self.prefix}rewardbus.attempts"

    @property
    def replies_prefix(self) -> str:
        """Every reply topic starts with this; workers produce to no other reply topic."""
        return f"{self.prefix}rewardbus.replies."

    def reply_topic(self, client: str) -> str:
        """The reply topic of one waiting client (e.g. one verl reward-loop process).

        >>> Topics(prefix="exp1.").reply_topic("host-42")
        'exp1.rewardbus.replies.host-42'
        """
        return f"{self.replies_prefix}{client}"

    def is_reply_topic(self, topic: str) -> bool:
        """Whether ``topic`` names a reply topic of this deployment."""
        suffix = topic.removeprefix(self.replies_prefix)
        return suffix != topic and bool(suffix) and all(c.isalnum() or c in "._-" for c in suffix)

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
            self.attempts,
        )
