"""ScoredBatch -> verl DataProto: score placement, masks, advantages in parity with verl's GRPO."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.trainer.ppo.reward import extract_reward

from consumers import AssemblerLimits, BatchAssembler, StalenessPolicy, masked_uid
from consumers.verl_batch import REWARD_EXTRA_KEYS, scored_batch_to_dataproto
from schemas import BatchManifest, RewardEvent, ScoredBatch, Verdict

NOW = 1_000_000.0
PROMPT_LEN = 6
RESPONSE_LEN = 8
SANDBOX_ERROR = -1.0  # in a list of drawn scores: that sample's reward is a sandbox_error
MISSING = -2.0  # in a list of drawn scores: that sample has no reward by the deadline


def scored_batch(
    scores: Sequence[float],
    groups: Sequence[str],
    *,
    norm: bool = True,
    versions: Sequence[int] | None = None,
) -> ScoredBatch:
    """Through the real assembler, as the aggregator would emit it."""
    ids = [f"s{i}" for i in range(len(scores))]
    manifest = BatchManifest(batch_id="b", sample_ids=ids, group_ids=list(groups), deadline=NOW + 1)
    assembler = BatchAssembler(AssemblerLimits(normalize_by_std=norm))
    assembler.add_manifest(manifest, NOW)
    for i, score in enumerate(scores):
        if score == MISSING:
            continue
        failed = score == SANDBOX_ERROR
        assembler.add_reward(
            RewardEvent(
                sample_id=ids[i],
                batch_id="b",
                policy_version=versions[i] if versions else 0,
                score=0.0 if failed else score,
                verdict=Verdict.SANDBOX_ERROR if failed else Verdict.WRONG_ANSWER,
                passed=1,
                total=2,
            ),
            NOW,
        )
    (ready,) = assembler.due(NOW + 1)
    return ready.batch


def rollout(
    sample_ids: Sequence[str], *, seed: int = 0, device: str = "cpu", shuffle: bool = True
) -> DataProto:
    """A verl-shaped rollout: left-padded prompts, right-padded responses, rows shuffled."""
    rng = random.Random(seed)
    order = list(sample_ids)
    if shuffle:
        rng.shuffle(order)
    n = len(order)
    prompt_mask = torch.zeros(n, PROMPT_LEN, dtype=torch.int64)
    response_mask = torch.zeros(n, RESPONSE_LEN, dtype=torch.int64)
    for row in range(n):
        prompt_mask[row, PROMPT_LEN - rng.randint(1, PROMPT_LEN) :] = 1
        response_mask[row, : rng.randint(1, RESPONSE_LEN)] = 1
    prompts = torch.randint(3, 50, (n, PROMPT_LEN)) * prompt_mask
    responses = torch.randint(3, 50, (n, RESPONSE_LEN)) * response_mask
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
        },
        non_tensors={
            "uid": np.array([f"rollout-uid-{sid}" for sid in order], dtype=object),
            "sample_id": np.array(order, dtype=object),
            "data_source": np.array(["test"] * n, dtype=object),
        },
        meta_info={"global_steps": 3},
    ).to(device)


def by_sample(scored: ScoredBatch, data: DataProto) -> list[int]:
    """Rollout row -> index in the scored batch's sample list."""
    index = {s.sample_id: i for i, s in enumerate(scored.samples)}
    return [index[str(sid)] for sid in data.non_tensor_batch["sample_id"]]


def verl_grpo(data: DataProto, uid: Sequence[str] | np.ndarray, norm: bool) -> torch.Tensor:
    advantages, returns = compute_grpo_outcome_advantage(
        token_level_rewards=data.batch["token_level_rewards"],
        response_mask=data.batch["response_mask"],
        index=np.asarray(uid, dtype=object),
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=norm,
    )
    assert torch.equal(advantages, returns)
    return advantages


# -- parity with verl ------------------------------------------------------------------


outcomes_st = st.lists(
    st.tuples(
        st.sampled_from([0.0, 0.25, 0.5, 1.0, SANDBOX_ERROR, MISSING]), st.sampled_from("abcd")
    ),
    min_size=1,
    max_size=16,
)


@settings(max_examples=60, deadline=None)
@given(outcomes_st, st.booleans(), st.integers(0, 1000))
@example([(1.0, "a")], True, 0)  # a one-sample group: mean 0, std 1
@example([(1.0, "a")], False, 0)
@example([(0.5, "a"), (0.5, "a"), (0.5, "a")], True, 0)  # all equal: std 0, advantages 0
@example([(1.0, "a"), (SANDBOX_ERROR, "a"), (MISSING, "a"), (0.0, "a")], True, 0)
def test_advantages_match_verls_grpo_and_masked_rows_get_nothing(
    outcomes: list[tuple[float, str]], norm: bool, seed: int
) -> None:
    scores = [s for s, _ in outcomes]
    scored = scored_batch(scores, [g for _, g in outcomes], norm=norm)
    data, counters = scored_batch_to_dataproto(
        scored, rollout([s.sample_id for s in scored.samples], seed=seed)
    )
    samples = [scored.samples[i] for i in by_sample(scored, data)]
    masked = torch.tensor([s.masked for s in samples])
    advantages = data.batch["advantages"]
    mask = data.batch["response_mask"]

    # The aggregator's advantages equal verl's estimator on the judged rows with their groups.
    judged = (~masked).nonzero().flatten().tolist()
    if judged:
        subset = data[judged]
        expected = verl_grpo(subset, [samples[i].group_id for i in judged], norm)
        assert torch.allclose(advantages[judged], expected, rtol=1e-5, atol=1e-5)
        aggregator = torch.tensor([samples[i].advantage for i in judged], dtype=torch.float32)
        assert torch.allclose(
            advantages[judged], aggregator.unsqueeze(-1) * mask[judged], rtol=1e-6, atol=1e-6
        )
    # verl's estimator re-run on the whole converted batch (its uid) agrees as well.
    assert torch.allclose(
        verl_grpo(data, data.non_tensor_batch["uid"], norm), advantages, atol=1e-5
    )
    # Masked rows: exactly zero advantage, zero mask, a group of their own.
    assert torch.all(advantages[masked] == 0) and torch.all(mask[masked] == 0)
    for row, sample in enumerate(samples):
        uid = data.non_tensor_batch["uid"][row]
        assert uid == (masked_uid(sample.sample_id) if sample.masked else sample.group_id)
    assert counters.trained == len(judged)
    assert counters.masked_missing + counters.masked_sandbox_error == int(masked.sum())


@settings(max_examples=40, deadline=None)
@given(outcomes_st, st.integers(0, 1000))
def test_the_score_sits_at_the_last_valid_response_token(
    outcomes: list[tuple[float, str]], seed: int
) -> None:
    scored = scored_batch([s for s, _ in outcomes], [g for _, g in outcomes])
    source = rollout([s.sample_id for s in scored.samples], seed=seed)
    data, _ = scored_batch_to_dataproto(scored, source)
    samples = [scored.samples[i] for i in by_sample(scored, data)]
    attention = source.batch["attention_mask"][:, PROMPT_LEN:]
    last = attention.sum(dim=-1) - 1
    scores = data.batch["token_level_scores"]
    for row, sample in enumerate(samples):
        expected = torch.zeros(RESPONSE_LEN)
        expected[last[row]] = 0.0 if sample.masked else sample.score
        assert torch.equal(scores[row], expected)
        # Unmasked rows keep verl's response mask: the response part of the attention mask.
        if not sample.masked:
            assert torch.equal(data.batch["response_mask"][row], attention[row])
    assert torch.equal(data.batch["token_level_rewards"], scores)
    assert torch.equal(data.batch["rm_scores"], scores)
    assert torch.equal(data.batch["returns"], data.batch["advantages"])


# -- the rest of the batch -----------------------------------------------------------------


def test_reward_extra_info_is_one_numpy_array_per_key_and_verl_can_read_it() -> None:
    scored = scored_batch([1.0, SANDBOX_ERROR, MISSING, 0.0], ["g"] * 4)
    source = rollout([s.sample_id for s in scored.samples], shuffle=False)
    extra = {"ground_truth": [{"inputs": [i]} for i in range(4)]}
    data, _ = scored_batch_to_dataproto(scored, source, extra_info=extra)
    reward, info = extract_reward(data)  # what verl's trainer calls on a batch with rm_scores
    assert torch.equal(reward, data.batch["token_level_scores"])
    assert list(info) == [*REWARD_EXTRA_KEYS, "ground_truth"]
    for key, values in info.items():
        assert isinstance(values, np.ndarray) and values.shape == (4,), key
    assert info["verdict"].tolist() == ["wrong_answer", "sandbox_error", "", "wrong_answer"]
    assert info["masked"].tolist() == [False, True, True, False]
    assert info["mask_reason"].tolist() == ["", "sandbox_error", "missing", ""]
    assert info["ground_truth"][2] == {"inputs": [2]}
    assert info["passed"].tolist() == [1, 1, 0, 1] and info["total"].tolist() == [2, 2, 0, 2]
    # The rollout's own tensors and columns travel along; the rollout itself is unchanged.
    assert torch.equal(data.batch["input_ids"], source.batch["input_ids"])
    assert data.non_tensor_batch["data_source"].tolist() == ["test"] * 4
    assert data.meta_info["global_steps"] == 3 and data.meta_info["rewardbus_batch_id"] == "b"
    assert "advantages" not in source.batch and source.meta_info == {"global_steps": 3}
    assert source.non_tensor_batch["uid"][0] == "rollout-uid-s0"


def test_staleness_drop_and_downweight_reach_the_tensors() -> None:
    scores, groups, versions = [1.0, 0.0, 1.0, 0.0], ["g"] * 4, [4, 4, 1, 4]
    scored = scored_batch(scores, groups, versions=versions)
    source = rollout([s.sample_id for s in scored.samples], shuffle=False)

    dropped, counters = scored_batch_to_dataproto(
        scored, source, learner_version=4, staleness=StalenessPolicy(max_staleness=2)
    )
    assert counters.stale_dropped == 1 and counters.max_lag == 3
    assert torch.all(dropped.batch["response_mask"][2] == 0)
    assert torch.all(dropped.batch["advantages"][2] == 0)
    assert dropped.non_tensor_batch["mask_reason"][2] == "stale"
    # The group is now the three fresh samples, as verl would compute it on them.
    fresh = verl_grpo(dropped[[0, 1, 3]], ["g"] * 3, True)
    assert torch.allclose(dropped.batch["advantages"][[0, 1, 3]], fresh, atol=1e-5)

    policy = StalenessPolicy(max_staleness=2, mode="downweight", weight=0.5)
    weighted, counters = scored_batch_to_dataproto(
        scored, source, learner_version=4, staleness=policy
    )
    assert counters.stale_downweighted == 1 and counters.stale_dropped == 0
    plain, _ = scored_batch_to_dataproto(scored, source)
    assert torch.allclose(weighted.batch["advantages"][2], plain.batch["advantages"][2] * 0.5)
    assert torch.equal(
        weighted.batch["advantages"][[0, 1, 3]], plain.batch["advantages"][[0, 1, 3]]
    )
    assert weighted.non_tensor_batch["advantage_weight"].tolist() == [1.0, 1.0, 0.5, 1.0]


def test_an_agent_loops_own_response_mask_is_kept() -> None:
    scored = scored_batch([1.0, 0.0], ["g", "g"])
    source = rollout(["s0", "s1"], shuffle=False)
    tool_tokens = source.batch["attention_mask"][:, PROMPT_LEN:].clone()
    tool_tokens[:, 0] = 0  # the first response token came from a tool, not the model
    source.batch["response_mask"] = tool_tokens
    data, _ = scored_batch_to_dataproto(scored, source)
    assert torch.equal(data.batch["response_mask"], tool_tokens)


def test_rows_that_do_not_match_are_refused_with_the_sample_named() -> None:
    scored = scored_batch([1.0, 0.0], ["g", "g"])
    with pytest.raises(ValueError, match=r"1 rollout samples are not in scored batch b.*'x9'"):
        scored_batch_to_dataproto(scored, rollout(["s0", "s1", "x9"]))
    with pytest.raises(ValueError, match=r"samples of scored batch b are not in the rollout.*'s1'"):
        scored_batch_to_dataproto(scored, rollout(["s0"]))
    with pytest.raises(ValueError, match="repeats sample ids"):
        scored_batch_to_dataproto(scored, rollout(["s0", "s1", "s1"]))
    bare = rollout(["s0", "s1"])
    del bare.non_tensor_batch["sample_id"]
    with pytest.raises(ValueError, match="no non_tensor_batch"):
        scored_batch_to_dataproto(scored, bare)


def test_bad_extra_info_is_refused() -> None:
    scored = scored_batch([1.0, 0.0], ["g", "g"])
    source = rollout(["s0", "s1"])
    with pytest.raises(ValueError, match="has 1 values for 2 rows"):
        scored_batch_to_dataproto(scored, source, extra_info={"x": [1]})
    with pytest.raises(ValueError, match="'score' is one rewardbus sets itself"):
        scored_batch_to_dataproto(scored, source, extra_info={"score": [1, 2]})


def test_tensors_are_built_on_the_rollouts_device() -> None:
    # Off a GPU, the meta device still tells a tensor built on the rollout's device from
    # one built on the default (CPU) device.
    device = "cuda" if torch.cuda.is_available() else "meta"
    scored = scored_batch([1.0, 0.0, 0.5], ["g"] * 3)
    data, _ = scored_batch_to_dataproto(scored, rollout(["s0", "s1", "s2"], device=device))
    for key in ("token_level_scores", "response_mask", "advantages", "returns"):
        assert data.batch[key].device.type == torch.device(device).type, key
