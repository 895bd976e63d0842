"""The learner's per-sample plan: masking, staleness (drop / down-weight), final advantages."""

from __future__ import annotations

import math
import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumers import (
    AssemblerLimits,
    BatchAssembler,
    LearnerCounters,
    MaskReason,
    StalenessPolicy,
    grpo_advantages,
    masked_uid,
    plan_batch,
)
from schemas import BatchManifest, RewardEvent, ScoredBatch, ScoredSample, Verdict

NOW = 1_000_000.0

Outcome = tuple[float | None, int]  # (score, or None for a sandbox_error; policy_version)


def scored_batch(
    outcomes: list[Outcome | None], *, group_size: int = 4, norm: bool = True
) -> ScoredBatch:
    """Through the real assembler: ``None`` is a sample missing at the deadline."""
    ids = [f"s{i}" for i in range(len(outcomes))]
    manifest = BatchManifest(
        batch_id="b",
        sample_ids=ids,
        group_ids=[f"g{i // group_size}" for i in range(len(ids))],
        deadline=NOW + 1,
    )
    assembler = BatchAssembler(AssemblerLimits(normalize_by_std=norm))
    assembler.add_manifest(manifest, NOW)
    for i, item in enumerate(outcomes):
        if item is None:
            continue
        score, version = item
        assembler.add_reward(
            RewardEvent(
                sample_id=ids[i],
                batch_id="b",
                policy_version=version,
                score=0.0 if score is None else score,
                verdict=Verdict.SANDBOX_ERROR if score is None else Verdict.WRONG_ANSWER,
            ),
            NOW,
        )
    (ready,) = assembler.due(NOW + 1)
    return ready.batch


def test_without_staleness_the_aggregators_advantages_are_kept() -> None:
    batch = scored_batch([(1.0, 0), (0.0, 0), (None, 0), None, (0.5, 0)])
    plans, counters = plan_batch(batch)
    assert [p.advantage for p in plans.values()] == [s.advantage for s in batch.samples]
    assert [p.mask_reason for p in plans.values()] == [
        MaskReason.NONE,
        MaskReason.NONE,
        MaskReason.SANDBOX_ERROR,
        MaskReason.MISSING,
        MaskReason.NONE,
    ]
    assert plans["s2"].uid == masked_uid("s2") and plans["s0"].uid == "g0"
    assert (plans["s2"].score, plans["s3"].score, plans["s2"].weight) == (0.0, 0.0, 0.0)
    assert counters == LearnerCounters(
        batches=1, samples=5, trained=3, masked_missing=1, masked_sandbox_error=1
    )


def test_drop_masks_stale_samples_and_regroups_the_rest() -> None:
    # Learner at version 5, max staleness 2: versions 2 and 1 are stale, 3 is not.
    batch = scored_batch([(1.0, 5), (0.0, 3), (1.0, 2), (0.0, 1), (0.25, 5)])
    plans, counters = plan_batch(
        batch, learner_version=5, staleness=StalenessPolicy(max_staleness=2)
    )
    assert plans["s2"].mask_reason is MaskReason.STALE and plans["s2"].advantage == 0.0
    assert plans["s2"].uid == masked_uid("s2") and plans["s2"].lag == 3
    # A stale sample's score is a real reward: kept for logging, not for training.
    assert plans["s2"].score == 1.0
    expected, _ = grpo_advantages([1.0, 0.0], ["g0", "g0"])
    assert [plans["s0"].advantage, plans["s1"].advantage] == pytest.approx(expected)
    # Group g1 lost nothing: the aggregator's advantage stands.
    assert plans["s4"].advantage == batch.samples[4].advantage
    assert (counters.stale_dropped, counters.trained, counters.max_lag) == (2, 3, 4)


def test_downweight_scales_stale_advantages_and_keeps_the_group() -> None:
    batch = scored_batch([(1.0, 5), (0.0, 1), (1.0, 5), (0.0, 5)])
    policy = StalenessPolicy(max_staleness=1, mode="downweight", weight=0.25)
    plans, counters = plan_batch(batch, learner_version=5, staleness=policy)
    assert plans["s1"].advantage == pytest.approx(batch.samples[1].advantage * 0.25)
    assert plans["s1"].weight == 0.25 and not plans["s1"].masked and plans["s1"].uid == "g0"
    assert [plans[s].advantage for s in ("s0", "s2", "s3")] == [
        batch.samples[i].advantage for i in (0, 2, 3)
    ]
    assert (counters.stale_downweighted, counters.stale_dropped, counters.trained) == (1, 0, 4)


def test_a_learner_version_alone_only_measures_the_lag() -> None:
    batch = scored_batch([(1.0, 2), (0.0, 9)])
    plans, counters = plan_batch(batch, learner_version=7)
    assert (plans["s0"].lag, plans["s1"].lag) == (5, 0)  # a newer policy is not stale
    assert counters.max_lag == 5 and counters.trained == 2


def test_an_unflagged_sandbox_error_from_an_older_aggregator_is_masked_and_regrouped() -> None:
    batch = ScoredBatch(
        batch_id="old",
        samples=[
            ScoredSample(sample_id="a", group_id="g", score=1.0, verdict=Verdict.ACCEPTED),
            ScoredSample(sample_id="b", group_id="g", score=0.0, verdict=Verdict.WRONG_ANSWER),
            ScoredSample(sample_id="c", group_id="g", score=0.0, verdict=Verdict.SANDBOX_ERROR),
        ],
    )
    plans, counters = plan_batch(batch)
    assert plans["c"].mask_reason is MaskReason.SANDBOX_ERROR and plans["c"].advantage == 0.0
    expected, _ = grpo_advantages([1.0, 0.0], ["g", "g"])
    assert [plans["a"].advantage, plans["b"].advantage] == pytest.approx(expected)
    assert counters.masked_sandbox_error == 1


def test_policies_are_validated() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        StalenessPolicy(max_staleness=-1)
    with pytest.raises(ValueError, match="mode"):
        StalenessPolicy(max_staleness=1, mode="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weight"):
        StalenessPolicy(max_staleness=1, mode="downweight", weight=1.5)


def test_a_batch_repeating_a_sample_id_is_refused() -> None:
    batch = scored_batch([(1.0, 0), (0.0, 0)])
    twice = msgspec.structs.replace(batch, samples=[batch.samples[0], batch.samples[0]])
    with pytest.raises(ValueError, match="repeats sample ids"):
        plan_batch(twice)


def test_counters_add_up_and_keep_the_largest_lag() -> None:
    a = LearnerCounters(batches=1, samples=4, trained=3, masked_missing=1, max_lag=2)
    b = LearnerCounters(batches=1, samples=2, trained=1, stale_dropped=1, max_lag=5)
    assert a + b == LearnerCounters(
        batches=2, samples=6, trained=4, masked_missing=1, stale_dropped=1, max_lag=5
    )


outcome_st = st.none() | st.tuples(
    st.sampled_from([None, 0.0, 0.5, 1.0]), st.integers(min_value=0, max_value=6)
)
policy_st = st.none() | st.builds(
    StalenessPolicy,
    max_staleness=st.integers(0, 4),
    mode=st.sampled_from(["drop", "downweight"]),
    weight=st.sampled_from([0.0, 0.5, 1.0]),
)


@settings(max_examples=300)
@given(
    st.lists(outcome_st, min_size=1, max_size=14),
    st.integers(1, 4),
    st.booleans(),
    policy_st,
    st.integers(0, 6),
)
def test_final_advantages_are_grpo_over_exactly_the_trained_samples(
    outcomes: list[Outcome | None],
    group_size: int,
    norm: bool,
    policy: StalenessPolicy | None,
    learner_version: int,
) -> None:
    batch = scored_batch(outcomes, group_size=group_size, norm=norm)
    plans, counters = plan_batch(batch, learner_version=learner_version, staleness=policy)
    trained = [p for p in plans.values() if not p.masked]
    expected, _ = grpo_advantages(
        [p.sample.score for p in trained],
        [p.sample.group_id for p in trained],
        normalize_by_std=norm,
    )
    assert [p.advantage for p in trained] == pytest.approx(
        [a * p.weight for a, p in zip(expected, trained, strict=True)], abs=1e-9
    )
    for plan in plans.values():
        assert plan.masked == (plan.weight == 0.0 and plan.uid == masked_uid(plan.sample.sample_id))
        if plan.masked:
            assert plan.advantage == 0.0
        stale = policy is not None and plan.lag > policy.max_staleness
        assert (plan.mask_reason is MaskReason.STALE) == (
            stale and policy is not None and policy.mode == "drop" and not plan.sample.masked
        )
    assert counters.trained == len(trained) and counters.samples == len(outcomes)
    assert counters.trained + counters.masked_missing + counters.masked_sandbox_error + (
        counters.stale_dropped
    ) == len(outcomes)
    assert math.isfinite(sum(p.advantage for p in plans.values()))


def test_importing_consumers_does_not_pull_torch_or_verl() -> None:
    """verl is an optional extra: only consumers.verl_batch may import it."""
    code = "import sys, consumers; print(sorted({'torch', 'verl'} & set(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
