"""verl's policy loss, as the train demo's learner calls it.

``verl.trainer.ppo.core_algos.get_policy_loss_fn("vanilla")`` is verl's PPO-clip
objective (dual-clip included); it reads its clip ratios from an ``ActorConfig``
and aggregates with ``agg_loss``. Importing verl pulls torch, ray, tensordict and
omegaconf, so this module is imported only when the demo runs.
"""

from __future__ import annotations

from typing import Any

import torch

from rewardbus.train_demo.learner import AggregateFn, LearnerConfig, PolicyLossFn

__all__ = ["verl_actor_config", "verl_aggregate", "verl_policy_loss"]


def verl_actor_config(config: LearnerConfig, *, rollout_n: int, batch_size: int) -> Any:
    """An ``FSDPActorConfig`` carrying the learner's clip ratio and aggregation mode.

    verl's loss functions only read the clip ratios, ``clip_ratio_c`` and
    ``global_batch_info`` from it; the batch-size fields are there because the
    config validates them.
    """
    from verl.workers.config import FSDPActorConfig

    mini_batch = max(1, batch_size // config.mini_batches)
    return FSDPActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=mini_batch,
        ppo_micro_batch_size_per_gpu=mini_batch,
        ppo_epochs=config.ppo_epochs,
        rollout_n=rollout_n,
        clip_ratio=config.clip_ratio,
        clip_ratio_low=config.clip_ratio,
        clip_ratio_high=config.clip_ratio_high,
        loss_agg_mode=config.loss_agg_mode,
        entropy_coeff=config.entropy_coeff,
    )


def verl_policy_loss(config: LearnerConfig, *, rollout_n: int, batch_size: int) -> PolicyLossFn:
    """verl's ``vanilla`` policy loss, bound to an actor config built from ``config``."""
    from verl.trainer.ppo import core_algos

    actor = verl_actor_config(config, rollout_n=rollout_n, batch_size=batch_size)
    policy_loss = core_algos.get_policy_loss_fn("vanilla")  # type: ignore[no-untyped-call]

    def loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        value, metrics = policy_loss(
            old_log_prob, log_prob, advantages, response_mask.float(), loss_agg_mode, actor, None
        )
        return value, {key: float(v) for key, v in metrics.items()}

    return loss


def verl_aggregate() -> AggregateFn:
    """verl's ``core_algos.agg_loss`` (how its actor aggregates the entropy term too)."""
    from verl.trainer.ppo import core_algos

    def aggregate(loss_mat: torch.Tensor, loss_mask: torch.Tensor, mode: str) -> torch.Tensor:
        value: torch.Tensor = core_algos.agg_loss(
            loss_mat=loss_mat, loss_mask=loss_mask.float(), loss_agg_mode=mode
        )
        return value

    return aggregate
