"""The aggregator's configuration: one frozen value object, parsed at the edge."""

from __future__ import annotations

from dataclasses import dataclass

from consumers.assembler import AssemblerLimits

__all__ = ["AggregatorConfig"]


@dataclass(frozen=True)
class AggregatorConfig:
    """How the aggregator consumes, holds and emits.

    The pending and emitted bounds apply per assigned input partition (each
    partition has its own assembler, restored and dropped as partitions move).
    """

    group_id: str = "rewardbus-aggregator"
    # How often deadlines are checked when no records arrive (the poll timeout).
    deadline_check_interval_s: float = 0.2
    # Rewards held for batches whose manifest has not arrived: at most this many
    # batches and samples, each batch for at most pending_ttl_s; beyond that they
    # are dropped, logged and counted.
    max_pending_batches: int = 10_000
    max_pending_samples: int = 100_000
    pending_ttl_s: float = 600
    # GRPO: divide by the group's std (verl's norm_adv_by_std_in_grpo).
    normalize_by_std: bool = True
    epsilon: float = 1e-6
    # Deadline for manifests that carry none (deadline <= 0), after their arrival.
    default_deadline_s: float = 600.0
    # Emitted batch ids are remembered this long (and at most this many) so that
    # late rewards and redelivered manifests are ignored rather than re-opened.
    emitted_retention_s: float = 3600.0
    max_emitted_remembered: int = 100_000
    # Records taken per poll: bounds the work (and memory) of one iteration.
    max_poll_records: int = 1000
    # A fetch returns once fetch_min_bytes are ready or after fetch_max_wait_ms:
    # answering each reward alone (min 1 byte) cost a broker fetch per reward; waiting
    # up to 50 ms batches them, at ~25 ms of added reward -> scored-batch latency.
    fetch_max_wait_ms: int = 50
    fetch_min_bytes: int = 1 << 20
    # State changes are persisted, then input offsets committed, at most this often
    # (and on revoke and shutdown). A crash redoes at most this much input, absorbed
    # by the sample_id dedup; an offset commit costs the broker ~0.7 ms of CPU.
    flush_interval_s: float = 0.5
    # Static membership: a restarted instance with the same id gets its partitions
    # back at once instead of after the session timeout.
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    # How long start-up waits for the manifests and rewards topics to exist.
    topic_wait_s: float = 30.0
    # Reading the state topic back after an assignment must finish within this.
    restore_timeout_s: float = 120.0
    # Named in dead letters, logs and the gauges' ``aggregator`` label.
    service_name: str = "aggregator"
    # How often the lag and open-batch gauges are refreshed (from in-memory state).
    gauge_interval_s: float = 1.0

    def limits(self) -> AssemblerLimits:
        """The per-partition bounds and scoring options for a :class:`BatchAssembler`."""
        return AssemblerLimits(
            max_pending_batches=self.max_pending_batches,
            max_pending_samples=self.max_pending_samples,
            pending_ttl_s=self.pending_ttl_s,
            default_deadline_s=self.default_deadline_s,
            emitted_retention_s=self.emitted_retention_s,
            max_emitted_remembered=self.max_emitted_remembered,
            normalize_by_std=self.normalize_by_std,
            epsilon=self.epsilon,
        )
