"""A ``ScoredBatch`` onto verl's rollout ``DataProto``: the tensors verl's PPO update reads.

Needs the ``verl`` extra (torch, verl); ``consumers`` does not import this module,
so the core installs without it. The per-sample decisions (masking, staleness,
advantages) are made by :func:`consumers.learner_plan.plan_batch`; this module only
places them, as verl places its own rewards:

- ``token_level_scores`` / ``token_level_rewards`` / ``rm_scores``: the score at the
  last valid response token (``valid_response_length - 1``, as
  ``RewardManagerBase.assemble_rm_scores`` does), zero elsewhere; no KL penalty here;
- ``response_mask``: the rollout's own, or ``attention_mask[:, -response_length:]``
  (``compute_response_mask``), zeroed on masked rows;
- ``advantages`` / ``returns``: the sample's GRPO advantage on every response token,
  times the mask (``compute_grpo_outcome_advantage`` returns them equal);
- ``uid``: the GRPO group (a group of its own for a masked row, so verl's estimator,
  run again on this batch, agrees with the aggregator);
- reward extra info per row as numpy arrays, named in ``meta_info["reward_extra_keys"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from verl import DataProto

from consumers.learner_plan import LearnerCounters, SamplePlan, StalenessPolicy, plan_batch
from schemas import ScoredBatch

__all__ = ["REWARD_EXTRA_KEYS", "scored_batch_to_dataproto"]

REWARD_EXTRA_KEYS = (
    "score",
    "verdict",
    "passed",
    "total",
    "cache_hit",
    "masked",
    "mask_reason",
    "policy_version",
    "staleness",
    "advantage_weight",
    "group_id",
)
"""The per-sample reward extra info every converted batch carries, in this order."""


def scored_batch_to_dataproto(
    scored: ScoredBatch,
    rollout: DataProto,
    *,
    learner_version: int | None = None,
    staleness: StalenessPolicy | None = None,
    extra_info: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[DataProto, LearnerCounters]:
    """The rollout with ``scored``'s rewards, mask and advantages; and what was masked.

    ``rollout`` holds ``responses`` (right-padded), ``attention_mask`` (prompt +
    response) and, in ``non_tensor_batch``, ``sample_id``; rows may be in any order
    and are matched by sample_id. Every rollout row must be in ``scored`` and every
    scored sample in the rollout (``ValueError`` otherwise). ``extra_info`` adds
    reward extra info columns, one value per rollout row in rollout order.

    The rollout is not modified: the result shares its tensors and adds new ones,
    built on the rollout's device.
    """
    plans, counters = plan_batch(scored, learner_version=learner_version, staleness=staleness)
    rows = _match_rows(scored, plans, _sample_ids(rollout))
    responses = rollout.batch["responses"]
    device = responses.device
    attention_mask = rollout.batch["attention_mask"]
    response_mask = _response_mask(rollout, responses.size(1))
    # As assemble_rm_scores: the reward sits on the last token the attention mask covers.
    valid_length = attention_mask[:, -responses.size(1) :].sum(dim=-1)
    last = (valid_length - 1).clamp(min=0)
    keep = torch.tensor([not row.masked for row in rows], device=device)
    mask = response_mask * keep.unsqueeze(-1).to(response_mask.dtype)
    scores = torch.zeros(responses.shape, dtype=torch.float32, device=device)
    scores[torch.arange(len(rows), device=device), last] = torch.tensor(
        [row.score for row in rows], dtype=torch.float32, device=device
    )
    advantage = torch.tensor([row.advantage for row in rows], dtype=torch.float32, device=device)
    advantages = advantage.unsqueeze(-1) * mask

    batch = rollout.batch.copy()  # shallow: the rollout's own tensors are shared, not copied
    batch["response_mask"] = mask
    batch["token_level_scores"] = scores
    batch["token_level_rewards"] = scores.clone()
    batch["rm_scores"] = scores.clone()
    batch["advantages"] = advantages
    batch["returns"] = advantages.clone()
    non_tensors = dict(rollout.non_tensor_batch)
    non_tensors["uid"] = _objects([row.uid for row in rows])
    extras = {**_reward_extra_info(rows), **_caller_extra_info(extra_info, len(rows))}
    non_tensors.update(extras)
    meta_info = {
        **rollout.meta_info,
        "reward_extra_keys": list(extras),
        "rewardbus_batch_id": scored.batch_id,
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info), counters


def _sample_ids(rollout: DataProto) -> list[str]:
    if "sample_id" not in rollout.non_tensor_batch:
        raise ValueError(
            "the rollout has no non_tensor_batch['sample_id']: rows cannot be matched "
            "to the scored batch"
        )
    return [str(sid) for sid in rollout.non_tensor_batch["sample_id"]]


def _match_rows(
    scored: ScoredBatch, plans: Mapping[str, SamplePlan], sample_ids: Sequence[str]
) -> list[SamplePlan]:
    if len(set(sample_ids)) != len(sample_ids):
        raise ValueError(f"the rollout for batch {scored.batch_id} repeats sample ids")
    unscored = [sid for sid in sample_ids if sid not in plans]
    if unscored:
        raise ValueError(
            f"{len(unscored)} rollout samples are not in scored batch {scored.batch_id} "
            f"(first: {unscored[0]!r}): is it the rollout of another batch?"
        )
    rows = set(sample_ids)
    absent = [sid for sid in plans if sid not in rows]
    if absent:
        raise ValueError(
            f"{len(absent)} samples of scored batch {scored.batch_id} are not in the rollout "
            f"(first: {absent[0]!r})"
        )
    return [plans[sid] for sid in sample_ids]


def _response_mask(rollout: DataProto, response_length: int) -> torch.Tensor:
    # An agent loop's rollout brings its own mask (tool-output tokens are 0): keep it.
    if "response_mask" in rollout.batch:
        mask: torch.Tensor = rollout.batch["response_mask"]
        return mask
    mask = rollout.batch["attention_mask"][:, -response_length:]
    return mask


def _reward_extra_info(rows: Sequence[SamplePlan]) -> dict[str, np.ndarray[Any, Any]]:
    samples = [row.sample for row in rows]
    columns: dict[str, np.ndarray[Any, Any]] = {
        "score": np.array([row.score for row in rows], dtype=np.float64),
        "verdict": _objects([str(s.verdict) if s.verdict is not None else "" for s in samples]),
        "passed": np.array([s.passed for s in samples], dtype=np.int64),
        "total": np.array([s.total for s in samples], dtype=np.int64),
        "cache_hit": np.array([s.cache_hit for s in samples], dtype=bool),
        "masked": np.array([row.masked for row in rows], dtype=bool),
        "mask_reason": _objects([str(row.mask_reason) for row in rows]),
        "policy_version": np.array([s.policy_version for s in samples], dtype=np.int64),
        "staleness": np.array([row.lag for row in rows], dtype=np.int64),
        "advantage_weight": np.array([row.weight for row in rows], dtype=np.float64),
        "group_id": _objects([s.group_id for s in samples]),
    }
    return columns


def _caller_extra_info(
    extra_info: Mapping[str, Sequence[Any]] | None, rows: int
) -> dict[str, np.ndarray[Any, Any]]:
    if not extra_info:
        return {}
    columns: dict[str, np.ndarray[Any, Any]] = {}
    for key, values in extra_info.items():
        if key in REWARD_EXTRA_KEYS:
            raise ValueError(f"extra_info key {key!r} is one rewardbus sets itself")
        if len(values) != rows:
            raise ValueError(f"extra_info[{key!r}] has {len(values)} values for {rows} rows")
        columns[key] = _objects(values)
    return columns


def _objects(values: Sequence[Any]) -> np.ndarray[Any, Any]:
    """A one-dimensional object array, even of lists or dicts (np.array would nest them)."""
    array = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        array[i] = value
    return array
