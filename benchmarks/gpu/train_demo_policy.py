"""The train demo's policy side on an accelerator, timed per step (self-contained: torch only).

What runs is the train demo's own policy code (``rewardbus.train_demo``: the
tiny causal LM, grammar-masked sampling with the shared-prompt KV cache, the
PPO-clip update) on the same task family. What differs, because the GPU machine
has no verl, ray, Kafka or network:

- REWARDS ARE COMPUTED IN-PROCESS by ``rewardbus.train_demo.tasks.local_score``,
  a plain local checker of the same family (fraction of assert cases passed,
  evaluated without ``eval``). No sandbox, no broker: these timings are the
  policy side alone, not the pipeline.
- The policy loss is a local copy of the PPO-clip formula of verl's
  ``core_algos.compute_policy_loss_vanilla`` (dual-clip, token-mean), and GRPO
  advantages are computed here as verl computes them (group mean, unbiased std).

Usage (from the repository root)::

    python benchmarks/gpu/train_demo_policy.py --device cuda --minutes 3
    python benchmarks/gpu/train_demo_policy.py --device cpu --steps 3   # smoke run

Prints one JSON object per step (timings in ms) and a summary object last.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from rewardbus.tokenizer import EOS_TOKEN, PAD_TOKEN, character_vocab
from rewardbus.train_demo.devices import empty_cache, resolve_device
from rewardbus.train_demo.grammar import ExpressionGrammar
from rewardbus.train_demo.learner import (
    LearnerBatch,
    LearnerConfig,
    make_optimizer,
    make_scheduler,
    update,
)
from rewardbus.train_demo.policy import PolicyConfig, build_policy
from rewardbus.train_demo.rollout import allowed_mask, sample
from rewardbus.train_demo.tasks import local_score, task_family


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def local_ppo_clip_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float = 3.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The formula of verl's compute_policy_loss_vanilla (token-mean), copied for timing."""
    assert loss_agg_mode == "token-mean"
    mask = response_mask.float()
    negative_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_kl)
    losses1 = -advantages * ratio
    losses2 = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(losses1, losses2)
    dual = torch.min(-advantages * clip_c, clipped)
    losses = torch.where(advantages < 0, dual, clipped)
    metrics = {
        "actor/pg_clipfrac": float(masked_mean(torch.gt(losses2, losses1).float(), mask).detach()),
        "actor/ppo_kl": float(masked_mean(-negative_kl, mask).detach()),
    }
    return masked_mean(losses, mask), metrics


def token_mean(loss_mat: torch.Tensor, loss_mask: torch.Tensor, mode: str) -> torch.Tensor:
    assert mode == "token-mean"
    return masked_mean(loss_mat, loss_mask.float())


def grpo_advantages(scores: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Per-sample (score - group mean) / (unbiased group std + eps), as verl's GRPO."""
    out = torch.zeros_like(scores)
    for group in groups.unique():
        rows = groups == group
        values = scores[rows]
        std = values.std() if values.numel() > 1 else torch.ones(())
        mean = values.mean() if values.numel() > 1 else torch.zeros(())
        out[rows] = (values - mean) / (std + eps)
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "npu":
        torch.npu.synchronize()  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("auto", "cpu", "cuda", "npu"))
    parser.add_argument("--steps", type=int, default=None, help="stop after N steps")
    parser.add_argument("--minutes", type=float, default=3.0, help="stop after this long")
    parser.add_argument("--group-size", type=int, default=32)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    device = resolve_device(args.device)
    torch.manual_seed(args.seed)
    vocab = character_vocab()
    eos, pad = vocab[EOS_TOKEN], vocab[PAD_TOKEN]
    grammar = ExpressionGrammar()
    allowed = allowed_mask(grammar.allowed_ids(vocab, eos), len(vocab), device)
    characters = {i: c for c, i in vocab.items() if len(c) == 1}
    tasks = task_family()
    step_tasks = [t for t in tasks for _ in range(args.group_size)]
    prompts = [[vocab[c] for c in t.header] for t in step_tasks]
    groups = torch.tensor([i // args.group_size for i in range(len(step_tasks))])
    config = LearnerConfig()
    policy = build_policy(
        PolicyConfig(vocab_size=len(vocab), d_model=args.d_model, n_layers=args.layers),
        seed=args.seed,
        device=device,
    )
    optimizer = make_optimizer(policy, config)
    # As the demo: the learning rate decays over the run (100 steps unless --steps says).
    schedule = make_scheduler(optimizer, config, args.steps or 100)
    sampling = torch.Generator(device=device).manual_seed(args.seed)
    shuffle = torch.Generator().manual_seed(args.seed + 1)

    deadline = time.monotonic() + 60 * args.minutes
    steps, rewards = 0, []
    started = time.monotonic()
    while (args.steps is None or steps < args.steps) and time.monotonic() < deadline:
        t0 = time.perf_counter()
        rollout = sample(policy, prompts, allowed, pad_id=pad, eos_id=eos, generator=sampling)
        sync(device)
        t1 = time.perf_counter()
        texts = [
            "".join(characters.get(i, "") for i in ids if i != eos)
            for ids in rollout.response_ids()
        ]
        # LOCAL CHECKER, not the sandbox pipeline (see the module docstring).
        scores = torch.tensor([local_score(t, x) for t, x in zip(step_tasks, texts, strict=True)])
        advantage = grpo_advantages(scores, groups).to(device)
        t2 = time.perf_counter()
        batch = LearnerBatch(
            input_ids=rollout.input_ids,
            attention_mask=rollout.attention_mask,
            position_ids=rollout.position_ids,
            responses=rollout.responses,
            response_mask=rollout.response_mask,
            old_log_probs=rollout.old_log_probs,
            advantages=advantage[:, None] * rollout.response_mask,
        )
        metrics = update(
            policy,
            optimizer,
            batch,
            allowed=allowed,
            loss_fn=local_ppo_clip_loss,
            config=config,
            aggregate_fn=token_mean,
            generator=shuffle,
        )
        schedule.step()
        sync(device)
        empty_cache(device)
        t3 = time.perf_counter()
        reward = float(scores.mean())
        rewards.append(reward)
        print(
            json.dumps(
                {
                    "step": steps,
                    "samples": len(step_tasks),
                    "sample_ms": round((t1 - t0) * 1000, 2),
                    "local_score_ms": round((t2 - t1) * 1000, 2),
                    "update_ms": round((t3 - t2) * 1000, 2),
                    "step_ms": round((t3 - t0) * 1000, 2),
                    "reward_mean_local": round(reward, 4),
                    "loss": round(metrics.loss, 5),
                }
            ),
            flush=True,
        )
        steps += 1
    elapsed = time.monotonic() - started
    window = max(1, min(5, len(rewards)))
    print(
        json.dumps(
            {
                "benchmark": "train_demo_policy",
                "rewards": "local in-process checker (not the sandbox pipeline)",
                "device": str(device),
                "device_name": torch.cuda.get_device_name(0) if device.type == "cuda" else "",
                "torch": torch.__version__,
                "python": platform.python_version(),
                "steps": steps,
                "samples_per_step": len(step_tasks),
                "elapsed_s": round(elapsed, 2),
                "steps_per_s": round(steps / max(elapsed, 1e-9), 3),
                "reward_mean_first_local": round(sum(rewards[:window]) / window, 4)
                if rewards
                else None,
                "reward_mean_last_local": round(sum(rewards[-window:]) / window, 4)
                if rewards
                else None,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
