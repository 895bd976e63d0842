"""The learner side of one step: sample a rollout, then update from its scored ``DataProto``.

Holds the policy, its optimiser and the grammar mask on the learner's device. The
rollout goes out in verl's layout (:func:`.rollout.rollout_dataproto`); what comes back is
the ``DataProto`` that :func:`consumers.verl_batch.scored_batch_to_dataproto`
made of the step's ``ScoredBatch`` (GRPO advantages, response mask with masked
rows zeroed), and :meth:`Trainer.learn` trains on exactly that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rewardbus.tokenizer import character_vocab
from rewardbus.train_demo.grammar import ExpressionGrammar
from rewardbus.train_demo.learner import (
    AggregateFn,
    LearnerBatch,
    LearnerConfig,
    PolicyLossFn,
    UpdateMetrics,
    make_optimizer,
    make_scheduler,
    update,
)
from rewardbus.train_demo.policy import PolicyConfig, build_policy
from rewardbus.train_demo.rollout import Rollout, allowed_mask, sample
from rewardbus.train_demo.tasks import Task

__all__ = ["Trainer", "TrainerSetup"]


@dataclass(frozen=True)
class TrainerSetup:
    """Everything a :class:`Trainer` is built from."""

    device: torch.device
    seed: int
    learner: LearnerConfig
    loss_fn: PolicyLossFn
    aggregate_fn: AggregateFn
    total_steps: int = 100
    grammar: ExpressionGrammar = field(default_factory=ExpressionGrammar)
    d_model: int = 64
    n_layers: int = 2


class Trainer:
    """The policy, its optimiser and the grammar mask; one rollout and one update per step."""

    def __init__(self, setup: TrainerSetup) -> None:
        self._setup = setup
        self._vocab = character_vocab()
        self._characters = {i: c for c, i in self._vocab.items() if len(c) == 1}
        self.pad_id = self._vocab["<pad>"]
        self.eos_id = self._vocab["<eos>"]
        config = PolicyConfig(
            vocab_size=len(self._vocab), d_model=setup.d_model, n_layers=setup.n_layers
        )
        self.policy = build_policy(config, seed=setup.seed, device=setup.device)
        self.optimizer = make_optimizer(self.policy, setup.learner)
        self._schedule = make_scheduler(self.optimizer, setup.learner, setup.total_steps)
        self.allowed = allowed_mask(
            setup.grammar.allowed_ids(self._vocab, self.eos_id), len(self._vocab), setup.device
        )
        # Sampling and mini-batch shuffling draw from their own seeded generators, so a
        # run is repeatable on a device; sampling's lives on the device (multinomial
        # needs a generator where its tensor is), the shuffle's on the CPU.
        self._sampling = torch.Generator(device=setup.device).manual_seed(setup.seed)
        self._shuffle = torch.Generator().manual_seed(setup.seed + 1)

    def prompt_ids(self, task: Task) -> list[int]:
        """The task's header as token ids (one per character)."""
        return [self._vocab[c] for c in task.header]

    def rollout(self, tasks: Sequence[Task]) -> tuple[Rollout, list[str]]:
        """One sampled response per task, and each response's text (``<eos>`` dropped)."""
        rollout = sample(
            self.policy,
            [self.prompt_ids(task) for task in tasks],
            self.allowed,
            pad_id=self.pad_id,
            eos_id=self.eos_id,
            generator=self._sampling,
        )
        texts = [
            "".join(self._characters.get(i, "") for i in ids if i != self.eos_id)
            for ids in rollout.response_ids()
        ]
        return rollout, texts

    def state_dict(self) -> dict[str, Any]:
        """Everything that changes as it trains: weights, optimiser, schedule, generators."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self._schedule.state_dict(),
            "sampling": self._sampling.get_state(),
            "shuffle": self._shuffle.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (saved on any device)."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._schedule.load_state_dict(state["schedule"])
        self._sampling.set_state(state["sampling"])
        self._shuffle.set_state(state["shuffle"])

    def learn(self, data: Any) -> UpdateMetrics:
        """One update from a scored ``DataProto`` (advantages and response mask from rewardbus)."""
        tensors = data.batch
        batch = LearnerBatch(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
            responses=tensors["responses"],
            response_mask=tensors["response_mask"],
            old_log_probs=tensors["old_log_probs"],
            advantages=tensors["advantages"],
        )
        metrics = update(
            self.policy,
            self.optimizer,
            batch,
            allowed=self.allowed,
            loss_fn=self._setup.loss_fn,
            config=self._setup.learner,
            aggregate_fn=self._setup.aggregate_fn,
            generator=self._shuffle,
        )
        self._schedule.step()
        return metrics
