"""One policy update from a scored step: PPO-clip epochs over mini-batches.

The loss is injected (:data:`PolicyLossFn`): the train demo passes verl's own
(:func:`rewardbus.train_demo.verl_loss.verl_policy_loss`, i.e.
``verl.trainer.ppo.core_algos``); the torch-only GPU benchmark passes a local
function. The advantages arrive already computed (GRPO, by the aggregator and
the ``ScoredBatch`` → ``DataProto`` conversion).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rewardbus.train_demo.policy import TinyCausalLM
from rewardbus.train_demo.rollout import response_log_probs

__all__ = [
    "AggregateFn",
    "LearnerBatch",
    "LearnerConfig",
    "PolicyLossFn",
    "UpdateMetrics",
    "make_optimizer",
    "make_scheduler",
    "update",
]

# (old_log_prob, log_prob, advantages, response_mask, loss_agg_mode) -> (loss, metrics)
PolicyLossFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, str],
    tuple[torch.Tensor, dict[str, float]],
]

# (loss_mat, loss_mask, loss_agg_mode) -> scalar: verl's ``core_algos.agg_loss``.
AggregateFn = Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor]


@dataclass(frozen=True)
class LearnerConfig:
    """Optimiser and PPO settings."""

    learning_rate: float = 1e-3
    # Linear decay to this fraction of the learning rate by the last step: at a constant
    # rate, policies that had solved the family were seen to drift off it again.
    final_lr_fraction: float = 0.1
    ppo_epochs: int = 2
    mini_batches: int = 2
    clip_ratio: float = 0.2
    # DAPO's "clip-higher" (verl's clip_ratio_high): more room for rare good answers to grow.
    clip_ratio_high: float = 0.28
    loss_agg_mode: str = "token-mean"
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    # verl's actor.entropy_coeff: the loss is pg_loss - entropy_coeff * entropy, which
    # keeps a policy trained from scratch from collapsing onto one answer for all prompts.
    entropy_coeff: float = 0.01


@dataclass(frozen=True)
class LearnerBatch:
    """What an update needs, on the learner's device (verl's tensor names)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    old_log_probs: torch.Tensor
    advantages: torch.Tensor

    def rows(self, index: torch.Tensor) -> LearnerBatch:
        """The sub-batch of rows ``index``."""
        return LearnerBatch(**{name: getattr(self, name)[index] for name in _FIELDS})


_FIELDS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "responses",
    "response_mask",
    "old_log_probs",
    "advantages",
)


@dataclass(frozen=True)
class UpdateMetrics:
    """Averages over the update's mini-batches."""

    loss: float
    grad_norm: float
    clip_fraction: float
    approx_kl: float


def make_optimizer(policy: TinyCausalLM, config: LearnerConfig) -> torch.optim.Optimizer:
    """AdamW over the policy's parameters."""
    return torch.optim.AdamW(
        policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )


def make_scheduler(
    optimizer: torch.optim.Optimizer, config: LearnerConfig, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear decay from the learning rate to ``final_lr_fraction`` of it over ``total_steps``."""
    span = max(1, total_steps - 1)
    drop = 1.0 - config.final_lr_fraction

    def factor(step: int) -> float:
        return 1.0 - drop * min(1.0, step / span)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def update(
    policy: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    batch: LearnerBatch,
    *,
    allowed: torch.Tensor,
    loss_fn: PolicyLossFn,
    config: LearnerConfig,
    aggregate_fn: AggregateFn,
    generator: torch.Generator,
) -> UpdateMetrics:
    """``ppo_epochs`` passes over ``batch`` in ``mini_batches`` shuffled mini-batches."""
    policy.train()
    rows = batch.input_ids.shape[0]
    losses, norms, clips, kls = [], [], [], []
    for _ in range(config.ppo_epochs):
        order = torch.randperm(rows, generator=generator).to(batch.input_ids.device)
        for index in order.chunk(config.mini_batches):
            part = batch.rows(index)
            if not bool(part.response_mask.any()):
                continue  # every sample masked (infrastructure faults): nothing to learn
            log_prob, entropy = response_log_probs(
                policy,
                input_ids=part.input_ids,
                attention_mask=part.attention_mask,
                position_ids=part.position_ids,
                responses=part.responses,
                response_mask=part.response_mask,
                allowed=allowed,
            )
            loss, metrics = loss_fn(
                part.old_log_probs, log_prob, part.advantages, part.response_mask,
                config.loss_agg_mode,
            )  # fmt: skip
            if config.entropy_coeff:
                loss = loss - config.entropy_coeff * aggregate_fn(
                    entropy, part.response_mask, config.loss_agg_mode
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            norms.append(float(norm))
            clips.append(metrics.get("actor/pg_clipfrac", 0.0))
            kls.append(metrics.get("actor/ppo_kl", 0.0))
    return UpdateMetrics(
        loss=_mean(losses), grad_norm=_mean(norms), clip_fraction=_mean(clips),
        approx_kl=_mean(kls),
    )  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
