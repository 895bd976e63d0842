"""GRPO outcome advantages, computed as verl computes them.

verl's ``compute_grpo_outcome_advantage`` (verl/trainer/ppo/core_algos.py) groups the
sequence scores by prompt index and, per group:

- one sample: mean 0, std 1 (so the advantage is the raw score);
- otherwise: the mean and the *unbiased* standard deviation (``torch.std`` divides by
  n - 1);

then ``advantage = (score - mean) / (std + epsilon)`` when ``norm_adv_by_std_in_grpo``
is true (the default), else ``score - mean``. verl works in float32 tensors; this
module works in float64, so results agree to float32 precision, not bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from schemas import GroupStats

__all__ = ["grpo_advantages"]


def grpo_advantages(
    scores: Sequence[float],
    group_ids: Sequence[str],
    *,
    normalize_by_std: bool = True,
    epsilon: float = 1e-6,
) -> tuple[list[float], dict[str, GroupStats]]:
    """Per-sample GRPO advantages and the statistics of each group.

    ``scores[i]`` belongs to group ``group_ids[i]``. The returned stats are the mean
    and std the advantages were computed with (for a one-sample group: 0 and 1, as
    verl uses), keyed by group in order of first appearance.
    """
    if len(scores) != len(group_ids):
        raise ValueError(f"{len(scores)} scores but {len(group_ids)} group ids")
    members: dict[str, list[float]] = {}
    for score, group in zip(scores, group_ids, strict=True):
        members.setdefault(group, []).append(float(score))
    stats = {group: _group_stats(values) for group, values in members.items()}
    advantages = [
        _advantage(float(score), stats[group], normalize_by_std, epsilon)
        for score, group in zip(scores, group_ids, strict=True)
    ]
    return advantages, stats


def _group_stats(values: list[float]) -> GroupStats:
    count = len(values)
    if count == 1:
        # verl's convention: a lone sample is its own baseline-free advantage.
        return GroupStats(mean=0.0, std=1.0, count=1)
    mean = math.fsum(values) / count
    variance = math.fsum((value - mean) ** 2 for value in values) / (count - 1)
    return GroupStats(mean=mean, std=math.sqrt(variance), count=count)


def _advantage(score: float, stats: GroupStats, normalize_by_std: bool, epsilon: float) -> float:
    centered = score - stats.mean
    return centered / (stats.std + epsilon) if normalize_by_std else centered
