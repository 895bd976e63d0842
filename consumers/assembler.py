"""Batch assembly: the aggregator's logic, with no broker in sight.

A :class:`BatchAssembler` holds the batches of one input partition. It is fed
manifests and rewards (in any order, with any duplication), says which batches are
ready (complete, or past their deadline) and turns them into ``ScoredBatch``es.
Every change to its state is also staged as a state-topic record
(:meth:`BatchAssembler.drain_changes`), and :meth:`BatchAssembler.restore` rebuilds
an assembler from those records, which is how the aggregator survives a crash.

Nothing here blocks or does I/O; time is passed in (``now``, epoch seconds) so that
tests decide what time it is.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec

from consumers.advantages import grpo_advantages
from consumers.errors import ConsumerError
from schemas import (
    AggregatorRecord,
    BatchManifest,
    BatchRecord,
    RewardEvent,
    SampleRecord,
    ScoredBatch,
    ScoredSample,
    Verdict,
    is_canary_batch,
    state_key,
)

__all__ = [
    "AssemblerCounters",
    "AssemblerLimits",
    "BatchAssembler",
    "InvalidMessageError",
    "ManifestOutcome",
    "ReadyBatch",
    "RewardOutcome",
    "StateChange",
    "build_scored_batch",
]

log = logging.getLogger(__name__)

StateChange = tuple[bytes, AggregatorRecord | None]
"""A state-topic write: key and record, or None for a tombstone."""


class InvalidMessageError(ConsumerError):
    """A message that decoded but cannot be aggregated; it belongs in the DLQ."""


class RewardOutcome(enum.StrEnum):
    """What :meth:`BatchAssembler.add_reward` did with a reward."""

    ACCEPTED = "accepted"
    HELD = "held"  # accepted before its manifest is known
    DUPLICATE = "duplicate"  # that sample already has a reward: the first one wins
    LATE = "late"  # its batch was already emitted
    UNKNOWN_SAMPLE = "unknown_sample"  # the manifest does not list that sample
    DROPPED = "dropped"  # the pending (manifest-less) caps are reached
    CANARY = "canary"  # a judge canary's reward: never part of a learner's batch


class ManifestOutcome(enum.StrEnum):
    """What :meth:`BatchAssembler.add_manifest` did with a manifest."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"  # its batch was already emitted
    CANARY = "canary"  # a manifest in the canary batch id space: ignored


@dataclass(frozen=True)
class AssemblerLimits:
    """Bounds and scoring options of one assembler (one input partition)."""

    max_pending_batches: int = 10_000
    max_pending_samples: int = 100_000
    pending_ttl_s: float = 600.0
    # For manifests that carry no deadline (deadline <= 0): this long after arrival.
    default_deadline_s: float = 600.0
    # How long, and how many, emitted batch ids are remembered to ignore late rewards.
    emitted_retention_s: float = 3600.0
    max_emitted_remembered: int = 100_000
    normalize_by_std: bool = True
    epsilon: float = 1e-6


@dataclass
class AssemblerCounters:
    """What an assembler accepted, ignored and dropped since it was created."""

    rewards_accepted: int = 0
    duplicate_rewards: int = 0
    late_rewards: int = 0
    unknown_samples: int = 0
    dropped_rewards: int = 0
    expired_batches: int = 0
    expired_samples: int = 0
    manifests_accepted: int = 0
    duplicate_manifests: int = 0
    late_manifests: int = 0
    batches_emitted: int = 0
    incomplete_batches: int = 0
    # Samples emitted masked (no training signal): no reward by the deadline, or an
    # infrastructure fault reported as such.
    missing_samples: int = 0
    sandbox_error_samples: int = 0
    # Rewards and manifests in the canary batch id space, ignored (see schemas.canary).
    canary_rewards: int = 0
    canary_manifests: int = 0


@dataclass(frozen=True)
class ReadyBatch:
    """A scored batch to emit, with the traceparents of its samples' spans."""

    batch: ScoredBatch
    links: tuple[str, ...]


@dataclass
class _Batch:
    header: BatchRecord
    samples: dict[str, SampleRecord] = field(default_factory=dict)
    # sample_id -> manifest index; empty while the manifest is unknown.
    positions: dict[str, int] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.header.manifest is not None and len(self.samples) == len(self.positions)


class BatchAssembler:
    """Assembles the batches of one input partition. Not thread-safe; no I/O."""

    def __init__(self, limits: AssemblerLimits | None = None) -> None:
        self.limits = limits or AssemblerLimits()
        self.counters = AssemblerCounters()
        self._open: dict[str, _Batch] = {}
        # Manifest-less batches, oldest first: the TTL sweep stops at the first young one.
        self._pending: dict[str, float] = {}
        self._pending_samples = 0
        # Emitted batch ids, oldest first, with their emission time.
        self._emitted: dict[str, float] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._complete: dict[str, None] = {}
        self._changes: dict[bytes, AggregatorRecord | None] = {}

    # -- feeding -----------------------------------------------------------------

    def add_manifest(self, manifest: BatchManifest, now: float) -> ManifestOutcome:
        """Take a batch's manifest; raises :class:`InvalidMessageError` if it is unusable."""
        _validate_manifest(manifest)
        batch_id = manifest.batch_id
        if is_canary_batch(batch_id):
            self.counters.canary_manifests += 1
            return ManifestOutcome.CANARY
        if batch_id in self._emitted:
            self.counters.late_manifests += 1
            return ManifestOutcome.LATE
        batch = self._open.get(batch_id)
        if batch is not None and batch.header.manifest is not None:
            self.counters.duplicate_manifests += 1
            return ManifestOutcome.DUPLICATE
        if batch is None:
            batch = self._open[batch_id] = _Batch(BatchRecord(batch_id=batch_id, first_seen=now))
        else:
            self._unpend(batch)
        deadline = (
            manifest.deadline if manifest.deadline > 0 else now + self.limits.default_deadline_s
        )
        batch.header = msgspec.structs.replace(batch.header, manifest=manifest, deadline=deadline)
        batch.positions = {sample_id: i for i, sample_id in enumerate(manifest.sample_ids)}
        self._drop_strays(batch)
        self._stage(state_key(batch_id), batch.header)
        heapq.heappush(self._deadlines, (deadline, batch_id))
        self._note_if_complete(batch)
        self.counters.manifests_accepted += 1
        return ManifestOutcome.ACCEPTED

    def add_reward(self, reward: RewardEvent, now: float, traceparent: str = "") -> RewardOutcome:
        """Take one reward; raises :class:`InvalidMessageError` if it is unusable.

        ``traceparent`` identifies the span that consumed the reward; the batch's
        emission span will link to it.
        """
        _validate_reward(reward)
        batch_id = reward.batch_id
        # Canaries reply to their own topic; one that reaches the rewards topic anyway
        # (an old worker, a misrouted reply) must not open a batch or hold state.
        if is_canary_batch(batch_id):
            self.counters.canary_rewards += 1
            return RewardOutcome.CANARY
        if batch_id in self._emitted:
            self.counters.late_rewards += 1
            return RewardOutcome.LATE
        batch = self._open.get(batch_id)
        if batch is not None and reward.sample_id in batch.samples:
            return self._count_duplicate(batch)
        if batch is not None and batch.header.manifest is not None:
            return self._add_to_known(batch, reward, now, traceparent)
        return self._add_to_pending(batch, reward, now, traceparent)

    # -- time ----------------------------------------------------------------------

    def due(self, now: float) -> list[ReadyBatch]:
        """Batches that are complete or past their deadline, scored; they are forgotten.

        Complete batches come first (in completion order), then expired ones in
        deadline order. Each batch id is remembered as emitted so that late rewards
        and manifests for it are ignored.
        """
        ready = dict(self._complete)
        self._complete.clear()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, batch_id = heapq.heappop(self._deadlines)
            batch = self._open.get(batch_id)
            # Entries are never removed from the heap: skip those already emitted.
            if batch is not None and batch.header.deadline == deadline:
                ready.setdefault(batch_id)
        return [self._emit(batch_id, now) for batch_id in ready]

    def expire(self, now: float) -> list[str]:
        """Drop manifest-less batches older than the TTL; forget old emitted ids.

        Returns the ids of the pending batches dropped (their rewards are lost,
        which is logged and counted: the manifest never came).
        """
        dropped: list[str] = []
        while self._pending:
            batch_id, first_seen = next(iter(self._pending.items()))
            if now - first_seen < self.limits.pending_ttl_s:
                break
            self._drop_pending(batch_id)
            dropped.append(batch_id)
        while self._emitted:
            batch_id, emitted_at = next(iter(self._emitted.items()))
            if now - emitted_at < self.limits.emitted_retention_s:
                break
            self._forget_emitted(batch_id)
        return dropped

    # -- state in and out -------------------------------------------------------------

    def drain_changes(self) -> list[StateChange]:
        """State-topic writes since the last drain, the latest value per key."""
        changes = list(self._changes.items())
        self._changes.clear()
        return changes

    def snapshot(self) -> list[AggregatorRecord]:
        """The whole state as records (what a fully compacted state topic holds)."""
        records: list[AggregatorRecord] = []
        for batch in self._open.values():
            records.append(batch.header)
            records.extend(batch.samples.values())
        records.extend(
            BatchRecord(batch_id=batch_id, first_seen=emitted_at, emitted_at=emitted_at)
            for batch_id, emitted_at in self._emitted.items()
        )
        return records

    def restore(self, records: Iterable[AggregatorRecord]) -> None:
        """Rebuild state from surviving state-topic records (latest value per key).

        Leftovers of a write interrupted by a crash (samples of an emitted batch,
        samples outside their manifest) are dropped, and tombstones for them staged.
        """
        if self._open or self._emitted or self._changes:
            raise RuntimeError("restore() needs a fresh assembler")
        samples: list[SampleRecord] = []
        for record in records:
            if isinstance(record, SampleRecord):
                samples.append(record)
            else:
                self._restore_header(record)
        for sample in samples:
            self._restore_sample(sample)
        self._pending = dict(sorted(self._pending.items(), key=lambda item: item[1]))
        self._emitted = dict(sorted(self._emitted.items(), key=lambda item: item[1]))
        for batch in self._open.values():
            self._note_if_complete(batch)

    # -- introspection ---------------------------------------------------------------

    @property
    def open_batches(self) -> int:
        """Batches held, with or without their manifest."""
        return len(self._open)

    @property
    def pending_batches(self) -> int:
        """Batches held whose manifest has not arrived."""
        return len(self._pending)

    @property
    def pending_samples(self) -> int:
        """Rewards held for batches whose manifest has not arrived."""
        return self._pending_samples

    def is_emitted(self, batch_id: str) -> bool:
        """Whether ``batch_id`` was emitted (and is still remembered)."""
        return batch_id in self._emitted

    # -- internals -------------------------------------------------------------------

    def _count_duplicate(self, batch: _Batch) -> RewardOutcome:
        batch.header = msgspec.structs.replace(batch.header, duplicates=batch.header.duplicates + 1)
        self._stage(state_key(batch.header.batch_id), batch.header)
        self.counters.duplicate_rewards += 1
        return RewardOutcome.DUPLICATE

    def _add_to_known(
        self, batch: _Batch, reward: RewardEvent, now: float, traceparent: str
    ) -> RewardOutcome:
        if reward.sample_id not in batch.positions:
            self.counters.unknown_samples += 1
            log.warning(
                "reward for sample %s ignored: not in the manifest of batch %s",
                reward.sample_id,
                reward.batch_id,
            )
            return RewardOutcome.UNKNOWN_SAMPLE
        self._hold(batch, reward, now, traceparent)
        self._note_if_complete(batch)
        return RewardOutcome.ACCEPTED

    def _add_to_pending(
        self, batch: _Batch | None, reward: RewardEvent, now: float, traceparent: str
    ) -> RewardOutcome:
        limits = self.limits
        full = (batch is None and len(self._pending) >= limits.max_pending_batches) or (
            self._pending_samples >= limits.max_pending_samples
        )
        if full:
            self.counters.dropped_rewards += 1
            log.warning(
                "reward for sample %s of batch %s dropped: %d batches / %d samples already "
                "wait for their manifest (limits %d / %d)",
                reward.sample_id,
                reward.batch_id,
                len(self._pending),
                self._pending_samples,
                limits.max_pending_batches,
                limits.max_pending_samples,
            )
            return RewardOutcome.DROPPED
        if batch is None:
            header = BatchRecord(batch_id=reward.batch_id, first_seen=now)
            batch = self._open[reward.batch_id] = _Batch(header)
            self._pending[reward.batch_id] = now
            self._stage(state_key(reward.batch_id), header)
        self._hold(batch, reward, now, traceparent)
        self._pending_samples += 1
        return RewardOutcome.HELD

    def _hold(self, batch: _Batch, reward: RewardEvent, now: float, traceparent: str) -> None:
        sample = SampleRecord(
            batch_id=reward.batch_id,
            sample_id=reward.sample_id,
            verdict=reward.verdict,
            received_at=now,
            group_id=reward.group_id,
            score=reward.score,
            passed=reward.passed,
            total=reward.total,
            cache_hit=reward.cache_hit,
            policy_version=reward.policy_version,
            traceparent=traceparent,
        )
        batch.samples[reward.sample_id] = sample
        self._stage(state_key(reward.batch_id, reward.sample_id), sample)
        self.counters.rewards_accepted += 1

    def _unpend(self, batch: _Batch) -> None:
        self._pending.pop(batch.header.batch_id, None)
        self._pending_samples -= len(batch.samples)

    def _drop_strays(self, batch: _Batch) -> None:
        """Held rewards that the manifest, now known, does not list."""
        strays = [sample_id for sample_id in batch.samples if sample_id not in batch.positions]
        for sample_id in strays:
            del batch.samples[sample_id]
            self._stage(state_key(batch.header.batch_id, sample_id), None)
            self.counters.unknown_samples += 1
        if strays:
            log.warning(
                "%d held rewards of batch %s ignored: not in its manifest (first: %s)",
                len(strays),
                batch.header.batch_id,
                strays[0],
            )

    def _note_if_complete(self, batch: _Batch) -> None:
        if batch.complete:
            self._complete[batch.header.batch_id] = None

    def _emit(self, batch_id: str, now: float) -> ReadyBatch:
        batch = self._open.pop(batch_id)
        manifest = batch.header.manifest
        if manifest is None:  # due() only considers batches with a manifest
            raise AssertionError(f"batch {batch_id} has no manifest")
        scored = build_scored_batch(
            manifest,
            batch.samples,
            duplicates=batch.header.duplicates,
            now=now,
            normalize_by_std=self.limits.normalize_by_std,
            epsilon=self.limits.epsilon,
        )
        links = tuple(
            sample.traceparent
            for sample_id in manifest.sample_ids
            if (sample := batch.samples.get(sample_id)) is not None and sample.traceparent
        )
        # The marker goes first: if a crash cuts the writes short, the restore still
        # knows the batch was emitted and tidies the samples left behind.
        self._remember_emitted(batch_id, now)
        for sample_id in batch.samples:
            self._stage(state_key(batch_id, sample_id), None)
        self.counters.batches_emitted += 1
        if not scored.complete:
            self.counters.incomplete_batches += 1
        self.counters.missing_samples += len(scored.missing)
        self.counters.sandbox_error_samples += len(scored.masked) - len(scored.missing)
        return ReadyBatch(scored, links)

    def _remember_emitted(self, batch_id: str, now: float) -> None:
        self._emitted[batch_id] = now
        marker = BatchRecord(batch_id=batch_id, first_seen=now, emitted_at=now)
        self._stage(state_key(batch_id), marker)
        while len(self._emitted) > self.limits.max_emitted_remembered:
            self._forget_emitted(next(iter(self._emitted)))

    def _forget_emitted(self, batch_id: str) -> None:
        del self._emitted[batch_id]
        self._stage(state_key(batch_id), None)

    def _drop_pending(self, batch_id: str) -> None:
        batch = self._open.pop(batch_id)
        self._unpend(batch)
        self._stage(state_key(batch_id), None)
        for sample_id in batch.samples:
            self._stage(state_key(batch_id, sample_id), None)
        self.counters.expired_batches += 1
        self.counters.expired_samples += len(batch.samples)
        log.warning(
            "batch %s dropped with %d held rewards: no manifest after %.0f s",
            batch_id,
            len(batch.samples),
            self.limits.pending_ttl_s,
        )

    def _restore_header(self, header: BatchRecord) -> None:
        batch_id = header.batch_id
        if header.emitted_at > 0:
            self._emitted[batch_id] = header.emitted_at
            return
        batch = self._open[batch_id] = _Batch(header)
        if header.manifest is None:
            self._pending[batch_id] = header.first_seen
            return
        batch.positions = {sample_id: i for i, sample_id in enumerate(header.manifest.sample_ids)}
        heapq.heappush(self._deadlines, (header.deadline, batch_id))

    def _restore_sample(self, sample: SampleRecord) -> None:
        key = state_key(sample.batch_id, sample.sample_id)
        if sample.batch_id in self._emitted:
            self._stage(key, None)
            return
        batch = self._open.get(sample.batch_id)
        if batch is None:
            # Its header write was lost: hold it as pending again and rewrite the header.
            header = BatchRecord(batch_id=sample.batch_id, first_seen=sample.received_at)
            batch = self._open[sample.batch_id] = _Batch(header)
            self._pending[sample.batch_id] = sample.received_at
            self._stage(state_key(sample.batch_id), header)
        if batch.header.manifest is not None and sample.sample_id not in batch.positions:
            self._stage(key, None)
            return
        batch.samples[sample.sample_id] = sample
        if batch.header.manifest is None:
            self._pending_samples += 1

    def _stage(self, key: bytes, record: AggregatorRecord | None) -> None:
        # Re-inserting moves the key to the end: writes keep the order of the latest change.
        self._changes.pop(key, None)
        self._changes[key] = record


def build_scored_batch(
    manifest: BatchManifest,
    samples: Mapping[str, SampleRecord],
    *,
    duplicates: int = 0,
    now: float,
    normalize_by_std: bool = True,
    epsilon: float = 1e-6,
) -> ScoredBatch:
    """Score a batch: samples in manifest order, masked ones listed, GRPO advantages.

    A sample's group is the manifest's ``group_ids[i]`` when given, else the group
    its reward names, else its position (``i // group_size``: consecutive samples
    of one prompt, verl's rollout layout). A sample is *masked* when its reward is
    missing (``present=False``, no score) or is an infrastructure fault (verdict
    ``sandbox_error``): an infrastructure failure is not a reward, so masked samples
    are left out of the group statistics and get advantage 0.
    """
    groups = [_group_of(manifest, i, samples.get(sid)) for i, sid in enumerate(manifest.sample_ids)]
    scored_at = [i for i, sid in enumerate(manifest.sample_ids) if not _is_masked(samples.get(sid))]
    advantages, stats = grpo_advantages(
        [samples[manifest.sample_ids[i]].score for i in scored_at],
        [groups[i] for i in scored_at],
        normalize_by_std=normalize_by_std,
        epsilon=epsilon,
    )
    advantage_at = dict(zip(scored_at, advantages, strict=True))
    scored = [
        _scored_sample(sid, groups[i], samples.get(sid), advantage_at.get(i, 0.0))
        for i, sid in enumerate(manifest.sample_ids)
    ]
    missing = [sid for sid in manifest.sample_ids if sid not in samples]
    return ScoredBatch(
        batch_id=manifest.batch_id,
        samples=scored,
        groups=stats,
        missing=missing,
        complete=not missing,
        policy_version=manifest.policy_version,
        duplicates_ignored=duplicates,
        masked=[sample.sample_id for sample in scored if sample.masked],
        advantage_norm_by_std=normalize_by_std,
        advantage_epsilon=epsilon,
        created_at=now,
    )


def _is_masked(sample: SampleRecord | None) -> bool:
    return sample is None or sample.verdict == Verdict.SANDBOX_ERROR


def _group_of(manifest: BatchManifest, index: int, sample: SampleRecord | None) -> str:
    if manifest.group_ids:
        return manifest.group_ids[index]
    if sample is not None and sample.group_id:
        return sample.group_id
    return str(index // max(manifest.group_size, 1))


def _scored_sample(
    sample_id: str, group_id: str, sample: SampleRecord | None, advantage: float
) -> ScoredSample:
    if sample is None:
        return ScoredSample(sample_id=sample_id, group_id=group_id, present=False, masked=True)
    return ScoredSample(
        sample_id=sample_id,
        group_id=group_id,
        score=sample.score,
        verdict=sample.verdict,
        advantage=advantage,
        passed=sample.passed,
        total=sample.total,
        cache_hit=sample.cache_hit,
        masked=_is_masked(sample),
        policy_version=sample.policy_version,
    )


def _validate_manifest(manifest: BatchManifest) -> None:
    if not manifest.batch_id:
        raise InvalidMessageError("manifest has an empty batch_id")
    if len(set(manifest.sample_ids)) != len(manifest.sample_ids):
        raise InvalidMessageError(f"manifest of batch {manifest.batch_id} repeats sample ids")
    if manifest.group_ids and len(manifest.group_ids) != len(manifest.sample_ids):
        raise InvalidMessageError(
            f"manifest of batch {manifest.batch_id} has {len(manifest.group_ids)} group ids "
            f"for {len(manifest.sample_ids)} samples"
        )


def _validate_reward(reward: RewardEvent) -> None:
    if not reward.batch_id or not reward.sample_id:
        raise InvalidMessageError(
            f"reward without batch_id or sample_id (sample {reward.sample_id!r}, "
            f"batch {reward.batch_id!r}): it cannot be aggregated"
        )
    if not math.isfinite(reward.score):
        raise InvalidMessageError(f"reward for sample {reward.sample_id} has score {reward.score}")
