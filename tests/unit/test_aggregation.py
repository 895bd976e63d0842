"""Batch assembly without a broker: dedup, reordering, deadlines, bounds, state, GRPO."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers import (
    AssemblerLimits,
    BatchAssembler,
    InvalidMessageError,
    ManifestOutcome,
    RewardOutcome,
    grpo_advantages,
)
from consumers.assembler import StateChange
from schemas import (
    AggregatorRecord,
    BatchManifest,
    BatchRecord,
    RewardEvent,
    SampleRecord,
    SchemaError,
    ScoredBatch,
    Verdict,
    decode,
    decode_state,
    encode,
    encode_state,
    state_key,
)

NOW = 1_000_000.0
DEADLINE = NOW + 60


# -- a direct transcription of verl's compute_grpo_outcome_advantage (no numpy/torch) ---


def verl_grpo_reference(
    scores: Sequence[float], index: Sequence[str], epsilon: float = 1e-6, norm: bool = True
) -> list[float]:
    id2score: dict[str, list[float]] = defaultdict(list)
    id2mean: dict[str, float] = {}
    id2std: dict[str, float] = {}
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    for idx, values in id2score.items():
        if len(values) == 1:
            id2mean[idx] = 0.0
            id2std[idx] = 1.0
        else:
            mean = sum(values) / len(values)
            id2mean[idx] = mean
            # torch.std: unbiased (Bessel's correction).
            id2std[idx] = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    out = []
    for i in range(len(scores)):
        centered = scores[i] - id2mean[index[i]]
        out.append(centered / (id2std[index[i]] + epsilon) if norm else centered)
    return out


# -- builders ----------------------------------------------------------------------------


def manifest(n: int, *, group_size: int = 4, batch_id: str = "b1", **kw: object) -> BatchManifest:
    ids = [f"{batch_id}-s{i}" for i in range(n)]
    return BatchManifest(
        batch_id=batch_id,
        sample_ids=ids,
        group_ids=[f"g{i // group_size}" for i in range(n)],
        group_size=group_size,
        deadline=float(kw.pop("deadline", DEADLINE)),  # type: ignore[arg-type]
        created_at=NOW,
    )


def reward(
    m: BatchManifest, i: int, score: float, *, verdict: Verdict | None = None, version: int = 0
) -> RewardEvent:
    return RewardEvent(
        sample_id=m.sample_ids[i],
        batch_id=m.batch_id,
        group_id=m.group_ids[i] if m.group_ids else "",
        policy_version=version,
        score=score,
        verdict=verdict or (Verdict.ACCEPTED if score == 1.0 else Verdict.WRONG_ANSWER),
        passed=round(score * 4),
        total=4,
        created_at=NOW,
    )


def sandbox_error(m: BatchManifest, i: int, *, version: int = 0) -> RewardEvent:
    """An infrastructure fault as a worker reports it: verdict sandbox_error, score 0."""
    return reward(m, i, 0.0, verdict=Verdict.SANDBOX_ERROR, version=version)


SANDBOX_ERROR = -1.0  # in a drawn list of scores: this sample's reward is a sandbox_error


def outcome(m: BatchManifest, i: int, score: float) -> RewardEvent:
    version = i % 3  # samples of one batch may come from different policy versions
    if score == SANDBOX_ERROR:
        return sandbox_error(m, i, version=version)
    return reward(m, i, score, version=version)


Delivery = BatchManifest | RewardEvent


def feed(assembler: BatchAssembler, deliveries: Sequence[Delivery], now: float = NOW) -> None:
    for item in deliveries:
        if isinstance(item, BatchManifest):
            assembler.add_manifest(item, now)
        else:
            assembler.add_reward(item, now, traceparent=f"tp-{item.sample_id}")


def comparable(batch: ScoredBatch) -> ScoredBatch:
    """The batch without what legitimately varies with delivery (duplicates, time)."""
    return msgspec.structs.replace(batch, duplicates_ignored=0, created_at=0.0)


def fold(changes: Sequence[StateChange]) -> dict[bytes, AggregatorRecord]:
    """What a compacted state topic keeps: the latest value per key, tombstones applied."""
    kept: dict[bytes, AggregatorRecord] = {}
    for key, record in changes:
        if record is None:
            kept.pop(key, None)
        else:
            kept[key] = decode_state(encode_state(record))  # through the wire format
    return kept


def key_of(record: AggregatorRecord) -> bytes:
    if isinstance(record, SampleRecord):
        return state_key(record.batch_id, record.sample_id)
    return state_key(record.batch_id)


scores_st = st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, SANDBOX_ERROR]), min_size=1, max_size=12)


@st.composite
def batches_and_deliveries(
    draw: st.DrawFn,
) -> tuple[BatchManifest, list[RewardEvent], list[Delivery]]:
    scores = draw(scores_st)
    m = manifest(len(scores), group_size=draw(st.integers(1, 4)))
    rewards = [outcome(m, i, s) for i, s in enumerate(scores)]
    extra = draw(st.lists(st.sampled_from([m, *rewards]), max_size=20))
    deliveries: list[Delivery] = draw(st.permutations([m, *rewards, *extra]))
    return m, rewards, deliveries


# -- GRPO --------------------------------------------------------------------------------


def test_advantages_of_one_group_match_the_hand_computed_values() -> None:
    advantages, stats = grpo_advantages([1.0, 0.0, 1.0, 0.0], ["g"] * 4)
    std = math.sqrt(1 / 3)  # unbiased: sum of squares 1.0 over n - 1 = 3
    assert stats["g"].mean == 0.5 and math.isclose(stats["g"].std, std) and stats["g"].count == 4
    assert advantages == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6)] * 2)


def test_a_lone_sample_keeps_its_score_as_verl_does() -> None:
    advantages, stats = grpo_advantages([0.7], ["solo"])
    assert (stats["solo"].mean, stats["solo"].std, stats["solo"].count) == (0.0, 1.0, 1)
    assert advantages == pytest.approx([0.7 / (1 + 1e-6)])


def test_identical_scores_give_zero_advantage_not_a_division_by_zero() -> None:
    advantages, stats = grpo_advantages([1.0, 1.0, 1.0], ["g"] * 3)
    assert stats["g"].std == 0.0 and advantages == [0.0, 0.0, 0.0]


@given(
    st.lists(
        st.tuples(st.floats(-5, 5, allow_nan=False), st.sampled_from("abcde")),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_advantages_match_verls_formula(pairs: list[tuple[float, str]], norm: bool) -> None:
    scores = [s for s, _ in pairs]
    groups = [g for _, g in pairs]
    advantages, stats = grpo_advantages(scores, groups, normalize_by_std=norm)
    expected = verl_grpo_reference(scores, groups, norm=norm)
    assert advantages == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert sum(s.count for s in stats.values()) == len(scores)


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="2 scores but 1 group ids"):
        grpo_advantages([1.0, 0.0], ["g"])


# -- order and duplication ---------------------------------------------------------------


@settings(max_examples=200)
@given(batches_and_deliveries())
def test_any_order_and_duplication_yields_the_same_batch(
    case: tuple[BatchManifest, list[RewardEvent], list[Delivery]],
) -> None:
    m, rewards, deliveries = case
    reference = BatchAssembler()
    feed(reference, [m, *rewards])
    (expected,) = reference.due(NOW)

    assembler = BatchAssembler()
    emitted = []
    for item in deliveries:
        feed(assembler, [item])
        emitted.extend(assembler.due(NOW))  # due() between deliveries must not matter
    assert len(emitted) == 1
    batch = emitted[0].batch
    assert comparable(batch) == comparable(expected.batch)
    assert batch.complete and batch.missing == []
    assert [s.sample_id for s in batch.samples] == m.sample_ids
    counters = assembler.counters
    ignored = counters.late_rewards + counters.late_manifests + counters.duplicate_manifests
    assert batch.duplicates_ignored + ignored == len(deliveries) - len(rewards) - 1
    assert emitted[0].links == tuple(f"tp-{sid}" for sid in m.sample_ids)


def test_the_first_reward_for_a_sample_wins() -> None:
    m = manifest(2)
    assembler = BatchAssembler()
    assembler.add_manifest(m, NOW)
    assert assembler.add_reward(reward(m, 0, 1.0), NOW) is RewardOutcome.ACCEPTED
    assert assembler.add_reward(reward(m, 0, 0.0), NOW) is RewardOutcome.DUPLICATE
    assert assembler.add_reward(reward(m, 1, 0.0), NOW) is RewardOutcome.ACCEPTED
    (ready,) = assembler.due(NOW)
    assert [s.score for s in ready.batch.samples] == [1.0, 0.0]
    assert ready.batch.duplicates_ignored == 1


def test_rewards_and_manifests_after_emission_are_ignored_and_counted() -> None:
    m = manifest(1)
    assembler = BatchAssembler()
    feed(assembler, [m, reward(m, 0, 1.0)])
    assert len(assembler.due(NOW)) == 1
    assert assembler.add_reward(reward(m, 0, 1.0), NOW) is RewardOutcome.LATE
    assert assembler.add_manifest(m, NOW) is ManifestOutcome.LATE
    assert assembler.due(NOW + 3600) == []
    assert (assembler.counters.late_rewards, assembler.counters.late_manifests) == (1, 1)


# -- infrastructure failures are not rewards ------------------------------------------------


def test_a_sandbox_error_is_left_out_of_its_groups_statistics() -> None:
    m = manifest(4)
    assembler = BatchAssembler()
    feed(assembler, [m, reward(m, 0, 1.0), reward(m, 1, 0.0), sandbox_error(m, 2)])
    feed(assembler, [reward(m, 3, 1.0)])
    (ready,) = assembler.due(NOW)
    batch = ready.batch
    failed = batch.samples[2]
    assert failed.present and failed.masked and failed.verdict is Verdict.SANDBOX_ERROR
    assert failed.advantage == 0.0
    assert batch.masked == [m.sample_ids[2]] and batch.complete and batch.missing == []
    # The group is the three judged samples: the fault did not count as a 0.
    assert (batch.groups["g0"].count, batch.groups["g0"].mean) == (3, pytest.approx(2 / 3))
    expected, _ = grpo_advantages([1.0, 0.0, 1.0], ["g0"] * 3)
    assert [batch.samples[i].advantage for i in (0, 1, 3)] == pytest.approx(expected)
    assert not any(batch.samples[i].masked for i in (0, 1, 3))
    assert (assembler.counters.sandbox_error_samples, assembler.counters.missing_samples) == (1, 0)


def test_a_group_of_only_sandbox_errors_has_no_statistics() -> None:
    m = manifest(2, group_size=2)
    assembler = BatchAssembler()
    feed(assembler, [m, sandbox_error(m, 0), sandbox_error(m, 1)])
    (ready,) = assembler.due(NOW)
    assert ready.batch.groups == {} and ready.batch.masked == m.sample_ids
    assert all(s.advantage == 0.0 and s.masked for s in ready.batch.samples)


@settings(max_examples=200)
@given(scores_st, st.data(), st.integers(1, 4), st.booleans())
def test_group_statistics_use_exactly_the_unmasked_samples(
    scores: list[float], data: st.DataObject, group_size: int, norm: bool
) -> None:
    m = manifest(len(scores), group_size=group_size)
    arrived = data.draw(st.lists(st.booleans(), min_size=len(scores), max_size=len(scores)))
    assembler = BatchAssembler(AssemblerLimits(normalize_by_std=norm))
    feed(assembler, [m, *(outcome(m, i, s) for i, s in enumerate(scores) if arrived[i])])
    (ready,) = assembler.due(DEADLINE)
    batch = ready.batch

    judged = [i for i, s in enumerate(scores) if arrived[i] and s != SANDBOX_ERROR]
    expected, stats = grpo_advantages(
        [scores[i] for i in judged], [m.group_ids[i] for i in judged], normalize_by_std=norm
    )
    assert batch.groups == stats
    assert [batch.samples[i].advantage for i in judged] == pytest.approx(expected, abs=1e-12)
    masked = [i for i in range(len(scores)) if i not in judged]
    assert batch.masked == [m.sample_ids[i] for i in masked]
    assert all(batch.samples[i].masked and batch.samples[i].advantage == 0.0 for i in masked)
    assert not any(batch.samples[i].masked for i in judged)
    assert batch.missing == [
        sid for sid, came in zip(m.sample_ids, arrived, strict=True) if not came
    ]
    assert (batch.advantage_norm_by_std, batch.advantage_epsilon) == (norm, 1e-6)
    counters = assembler.counters
    assert counters.missing_samples == len(batch.missing)
    assert counters.sandbox_error_samples == len(masked) - len(batch.missing)


def test_policy_version_reaches_the_scored_sample_and_survives_a_restore() -> None:
    m = manifest(2)
    first = BatchAssembler()
    feed(first, [m, reward(m, 0, 1.0, version=7)])
    second = BatchAssembler()
    second.restore(fold(first.drain_changes()).values())
    second.add_reward(reward(m, 1, 0.0, version=9), NOW)
    (ready,) = second.due(NOW)
    assert [s.policy_version for s in ready.batch.samples] == [7, 9]


def test_scored_batches_without_the_new_fields_still_decode() -> None:
    """A ScoredBatch from before masking and policy versions (old aggregator, old topic)."""
    old = msgspec.msgpack.encode(
        {
            "batch_id": "b",
            "samples": [{"sample_id": "s0", "score": 1.0, "verdict": "accepted"}],
            "missing": [],
            "complete": True,
            "schema_version": 1,
        }
    )
    batch = decode(old, ScoredBatch)
    assert batch.masked == [] and batch.advantage_norm_by_std and batch.advantage_epsilon == 1e-6
    assert not batch.samples[0].masked and batch.samples[0].policy_version == 0
    # And unmasked samples still omit the flag on the wire.
    assert b"masked" not in encode(batch.samples[0])


# -- deadlines -------------------------------------------------------------------------------


def test_a_batch_past_its_deadline_lists_its_missing_samples() -> None:
    m = manifest(6, group_size=3)
    assembler = BatchAssembler()
    feed(assembler, [m, reward(m, 0, 1.0), reward(m, 1, 0.0), reward(m, 4, 1.0)])
    assert assembler.due(DEADLINE - 0.001) == []
    (ready,) = assembler.due(DEADLINE)
    batch = ready.batch
    assert not batch.complete
    assert batch.missing == [m.sample_ids[i] for i in (2, 3, 5)]
    present = [s.present for s in batch.samples]
    assert present == [True, True, False, False, True, False]
    missing = [s for s in batch.samples if not s.present]
    # Never silently scored: no score, no verdict, no advantage, and masked.
    assert all(s.score == 0.0 and s.verdict is None and s.advantage == 0.0 for s in missing)
    assert all(s.masked for s in missing) and batch.masked == batch.missing
    assert assembler.counters.missing_samples == 3
    # Statistics over present samples only: g0 has two, g1 one (verl's lone-sample rule).
    assert batch.groups["g0"].count == 2 and batch.groups["g0"].mean == 0.5
    assert (batch.groups["g1"].mean, batch.groups["g1"].std, batch.groups["g1"].count) == (
        0.0,
        1.0,
        1,
    )
    assert [s.group_id for s in batch.samples] == ["g0"] * 3 + ["g1"] * 3


def test_a_manifest_without_deadline_gets_the_default_one() -> None:
    m = manifest(2, deadline=0.0)
    assembler = BatchAssembler(AssemblerLimits(default_deadline_s=30))
    feed(assembler, [m, reward(m, 0, 1.0)])
    assert assembler.due(NOW + 29) == []
    (ready,) = assembler.due(NOW + 30)
    assert ready.batch.missing == [m.sample_ids[1]]


def test_a_batch_with_no_group_ids_groups_by_reward_then_position() -> None:
    m = msgspec.structs.replace(manifest(4, group_size=2), group_ids=[])
    assembler = BatchAssembler()
    assembler.add_manifest(m, NOW)
    assembler.add_reward(msgspec.structs.replace(reward(m, 0, 1.0), group_id="p"), NOW)
    assembler.add_reward(reward(m, 1, 0.0), NOW)
    (ready,) = assembler.due(DEADLINE)
    assert [s.group_id for s in ready.batch.samples] == ["p", "0", "1", "1"]


def test_an_empty_manifest_is_complete_at_once() -> None:
    assembler = BatchAssembler()
    assembler.add_manifest(manifest(0), NOW)
    (ready,) = assembler.due(NOW)
    assert ready.batch.complete and ready.batch.samples == []


# -- rewards before their manifest: held, bounded --------------------------------------------


def test_rewards_before_the_manifest_are_held() -> None:
    m = manifest(2)
    assembler = BatchAssembler()
    assert assembler.add_reward(reward(m, 1, 1.0), NOW) is RewardOutcome.HELD
    assert (assembler.pending_batches, assembler.pending_samples) == (1, 1)
    assert assembler.due(NOW) == []
    assembler.add_manifest(m, NOW)
    assert (assembler.pending_batches, assembler.pending_samples) == (0, 0)
    assembler.add_reward(reward(m, 0, 0.0), NOW)
    (ready,) = assembler.due(NOW)
    assert ready.batch.complete


def test_pending_caps_drop_and_count() -> None:
    assembler = BatchAssembler(AssemblerLimits(max_pending_batches=2, max_pending_samples=3))
    a, b, c = (manifest(3, batch_id=x) for x in "abc")
    assert assembler.add_reward(reward(a, 0, 1.0), NOW) is RewardOutcome.HELD
    assert assembler.add_reward(reward(b, 0, 1.0), NOW) is RewardOutcome.HELD
    assert assembler.add_reward(reward(c, 0, 1.0), NOW) is RewardOutcome.DROPPED  # 3rd batch
    assert assembler.add_reward(reward(a, 1, 1.0), NOW) is RewardOutcome.HELD
    assert assembler.add_reward(reward(a, 2, 1.0), NOW) is RewardOutcome.DROPPED  # 4th sample
    assert assembler.counters.dropped_rewards == 2
    # A dropped sample is reported missing, not lost silently.
    assembler.add_manifest(a, NOW)
    (ready,) = assembler.due(DEADLINE)
    assert ready.batch.missing == [a.sample_ids[2]]


def test_pending_batches_expire_after_the_ttl() -> None:
    m = manifest(2)
    assembler = BatchAssembler(AssemblerLimits(pending_ttl_s=10))
    assembler.add_reward(reward(m, 0, 1.0), NOW)
    assert assembler.expire(NOW + 9) == []
    assert assembler.expire(NOW + 10) == ["b1"]
    assert (assembler.counters.expired_batches, assembler.counters.expired_samples) == (1, 1)
    assert (assembler.pending_batches, assembler.pending_samples) == (0, 0)
    # Its state is deleted too.
    assert fold(assembler.drain_changes()) == {}


def test_held_rewards_outside_the_manifest_are_dropped_and_counted() -> None:
    m = manifest(2)
    assembler = BatchAssembler()
    stray = msgspec.structs.replace(reward(m, 0, 1.0), sample_id="not-listed")
    assembler.add_reward(stray, NOW)
    assembler.add_manifest(m, NOW)
    assert assembler.counters.unknown_samples == 1
    assert assembler.add_reward(stray, NOW) is RewardOutcome.UNKNOWN_SAMPLE


def test_emitted_ids_are_forgotten_after_their_retention() -> None:
    m = manifest(1)
    assembler = BatchAssembler(AssemblerLimits(emitted_retention_s=100, max_emitted_remembered=5))
    feed(assembler, [m, reward(m, 0, 1.0)])
    assembler.due(NOW)
    assembler.expire(NOW + 99)
    assert assembler.is_emitted("b1")
    assembler.expire(NOW + 100)
    assert not assembler.is_emitted("b1")
    assert fold(assembler.drain_changes()) == {}


# -- validation ------------------------------------------------------------------------------


def test_unusable_messages_are_refused_with_a_reason() -> None:
    assembler = BatchAssembler()
    m = manifest(2)
    with pytest.raises(InvalidMessageError, match="repeats sample ids"):
        assembler.add_manifest(msgspec.structs.replace(m, sample_ids=["x", "x"]), NOW)
    with pytest.raises(InvalidMessageError, match="group ids"):
        assembler.add_manifest(msgspec.structs.replace(m, group_ids=["g"]), NOW)
    with pytest.raises(InvalidMessageError, match="without batch_id"):
        assembler.add_reward(msgspec.structs.replace(reward(m, 0, 1.0), batch_id=""), NOW)
    with pytest.raises(InvalidMessageError, match="score nan"):
        assembler.add_reward(msgspec.structs.replace(reward(m, 0, 1.0), score=math.nan), NOW)


# -- state out and back in -------------------------------------------------------------------


@settings(max_examples=150)
@given(batches_and_deliveries(), st.data())
def test_the_state_changes_fold_to_the_snapshot(
    case: tuple[BatchManifest, list[RewardEvent], list[Delivery]], data: st.DataObject
) -> None:
    _m, _rewards, deliveries = case
    assembler = BatchAssembler()
    changes: list[StateChange] = []
    for item in deliveries:
        feed(assembler, [item])
        if data.draw(st.booleans()):
            assembler.due(NOW)
        changes.extend(assembler.drain_changes())
    assert fold(changes) == {key_of(r): r for r in assembler.snapshot()}


@settings(max_examples=200)
@given(batches_and_deliveries(), st.data())
def test_a_crash_and_redelivery_yield_the_same_batch(
    case: tuple[BatchManifest, list[RewardEvent], list[Delivery]], data: st.DataObject
) -> None:
    """Persisted state + redelivery of everything after the last commit = no crash at all."""
    m, rewards, deliveries = case
    reference = BatchAssembler()
    feed(reference, [m, *rewards])
    (expected,) = reference.due(NOW)

    crash_at = data.draw(st.integers(0, len(deliveries)), label="crash_at")
    committed = data.draw(st.integers(0, crash_at), label="committed")
    before = BatchAssembler()
    emitted = []
    changes: list[StateChange] = []
    for item in deliveries[:crash_at]:
        feed(before, [item])
        emitted.extend(before.due(NOW))
        changes.extend(before.drain_changes())
    after = BatchAssembler()
    after.restore(fold(changes).values())
    for item in deliveries[committed:]:
        feed(after, [item])
        emitted.extend(after.due(NOW))
    assert len(emitted) == 1
    assert comparable(emitted[0].batch) == comparable(expected.batch)


def test_restore_keeps_a_batchs_deadline_and_pending_rewards() -> None:
    m, other = manifest(3), manifest(2, batch_id="b2")
    first = BatchAssembler()
    feed(first, [m, reward(m, 0, 1.0), reward(other, 1, 0.0)])
    second = BatchAssembler()
    second.restore(fold(first.drain_changes()).values())
    assert (second.open_batches, second.pending_batches, second.pending_samples) == (2, 1, 1)
    (ready,) = second.due(DEADLINE)
    assert ready.batch.batch_id == "b1" and len(ready.batch.missing) == 2
    assert ready.links == ("tp-b1-s0",)


def test_restore_tidies_samples_left_behind_by_an_interrupted_emission() -> None:
    m = manifest(2)
    marker = BatchRecord(batch_id="b1", first_seen=NOW, emitted_at=NOW)
    leftover = SampleRecord(
        batch_id="b1", sample_id=m.sample_ids[0], verdict=Verdict.ACCEPTED, received_at=NOW
    )
    assembler = BatchAssembler()
    assembler.restore([marker, leftover])
    assert assembler.is_emitted("b1") and assembler.open_batches == 0
    assert assembler.drain_changes() == [(state_key("b1", m.sample_ids[0]), None)]


def test_state_records_round_trip_and_garbage_is_a_schema_error() -> None:
    record = SampleRecord(
        batch_id="b", sample_id="s", verdict=Verdict.TIME_LIMIT, received_at=NOW, score=0.5
    )
    assert decode_state(encode_state(record)) == record
    assert state_key("a", "b") != state_key("a\x00b")
    with pytest.raises(SchemaError):
        decode_state(b"\xc1garbage")
    with pytest.raises(SchemaError):
        decode_state(None)
