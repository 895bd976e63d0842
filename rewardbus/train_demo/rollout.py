"""Sampling responses from the policy under the grammar mask, in verl's batch layout.

The layout is verl's: ``prompts`` left-padded, ``responses`` right-padded,
``input_ids`` their concatenation, ``attention_mask`` over both, ``position_ids``
counting real tokens only, ``response_mask`` over the response tokens up to and
including ``<eos>``. ``old_log_probs`` are the sampling distribution's
log-probabilities (the grammar mask applied), which the learner's ratio needs.

Both sampling and the learner's recomputation run each distinct prompt once and
continue its samples from the shared key/value cache (:mod:`.policy`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from rewardbus.train_demo.policy import KVCache, TinyCausalLM, select_rows

__all__ = [
    "Rollout",
    "allowed_mask",
    "left_pad",
    "response_log_probs",
    "rollout_dataproto",
    "rollout_of",
    "sample",
]


@dataclass(frozen=True)
class Rollout:
    """One step's samples, as tensors on the learner's device."""

    prompts: torch.Tensor
    responses: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    old_log_probs: torch.Tensor

    @classmethod
    def in_layout(
        cls,
        prompts: torch.Tensor,
        prompt_mask: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        old_log_probs: torch.Tensor,
    ) -> Rollout:
        """Prompts and responses with the rest of verl's layout derived from them."""
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        return cls(
            prompts=prompts,
            responses=responses,
            input_ids=torch.cat([prompts, responses], dim=1),
            attention_mask=attention_mask,
            position_ids=_positions(attention_mask),
            response_mask=response_mask,
            old_log_probs=old_log_probs,
        )

    def response_ids(self) -> list[list[int]]:
        """Each response's tokens (``<eos>`` included), without the padding."""
        lengths = self.response_mask.sum(dim=-1).tolist()
        rows = self.responses.tolist()
        return [row[: int(n)] for row, n in zip(rows, lengths, strict=True)]


def allowed_mask(
    allowed_ids: Sequence[Sequence[int]], vocab_size: int, device: torch.device
) -> torch.Tensor:
    """``[response_length, vocab]`` booleans: which tokens each position may take."""
    mask = torch.zeros(len(allowed_ids), vocab_size, dtype=torch.bool, device=device)
    for position, ids in enumerate(allowed_ids):
        mask[position, list(ids)] = True
    return mask


def left_pad(
    prompt_ids: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts and their attention mask."""
    width = max(len(ids) for ids in prompt_ids)
    prompts = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        prompts[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, width - len(ids) :] = 1
    return prompts.to(device), mask.to(device)


def rollout_of(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    pad_id: int,
    device: torch.device,
    response_length: int | None = None,
) -> Rollout:
    """Given token ids as a rollout: prompts left-padded, responses right-padded to
    ``response_length`` (default: the longest). No policy drew them: ``old_log_probs``
    are 0 (a reward loop never reads them)."""
    width = response_length or max(len(ids) for ids in response_ids)
    responses = torch.full((len(response_ids), width), pad_id, dtype=torch.long)
    response_mask = torch.zeros((len(response_ids), width), dtype=torch.long)
    for row, ids in enumerate(response_ids):
        responses[row, : len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        response_mask[row, : len(ids)] = 1
    prompts, prompt_mask = left_pad(prompt_ids, pad_id, device)
    return Rollout.in_layout(
        prompts,
        prompt_mask,
        responses.to(device),
        response_mask.to(device),
        torch.zeros(responses.shape, device=device),
    )


def rollout_dataproto(rollout: Rollout, non_tensors: Mapping[str, Sequence[Any]]) -> Any:
    """The rollout as verl's ``DataProto``: its tensors, and ``non_tensors`` (a value per
    sample each: ``uid``, ``sample_id``, ``data_source``...) as numpy object columns."""
    from verl import DataProto  # the verl extra; imported when a batch is built

    return DataProto.from_dict(
        tensors={
            "prompts": rollout.prompts,
            "responses": rollout.responses,
            "input_ids": rollout.input_ids,
            "attention_mask": rollout.attention_mask,
            "position_ids": rollout.position_ids,
            "response_mask": rollout.response_mask,
            "old_log_probs": rollout.old_log_probs,
        },
        non_tensors={name: _objects(values) for name, values in non_tensors.items()},
    )


def _objects(values: Sequence[Any]) -> np.ndarray[Any, np.dtype[Any]]:
    """A 1-D numpy object array (dicts and lists stay whole values, one per sample)."""
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


def _positions(attention_mask: torch.Tensor) -> torch.Tensor:
    return (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)


def _shared_prompts(
    prompts: torch.Tensor, prompt_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distinct prompt rows, their masks, and which one each sample uses."""
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    rows = torch.arange(prompts.shape[0], device=prompts.device)
    first = torch.full((unique.shape[0],), prompts.shape[0], device=prompts.device)
    first = first.scatter_reduce(0, inverse, rows, reduce="amin")
    return unique, prompt_mask[first], inverse


def _prompt_cache(
    policy: TinyCausalLM, prompts: torch.Tensor, prompt_mask: torch.Tensor
) -> tuple[torch.Tensor, KVCache]:
    """Each sample's next-token logits after its prompt, and its prompt's cache.

    Runs every distinct prompt once (a GRPO group shares one).
    """
    unique, unique_mask, inverse = _shared_prompts(prompts, prompt_mask)
    logits, cache = policy(unique, unique_mask, _positions(unique_mask))
    return logits[:, -1, :].index_select(0, inverse), select_rows(cache, inverse)


@torch.no_grad()
def sample(
    policy: TinyCausalLM,
    prompt_ids: Sequence[Sequence[int]],
    allowed: torch.Tensor,
    *,
    pad_id: int,
    eos_id: int,
    generator: torch.Generator,
    temperature: float = 1.0,
) -> Rollout:
    """Sample one response per prompt, each position restricted to ``allowed``."""
    device = allowed.device
    prompts, prompt_mask = left_pad(prompt_ids, pad_id, device)
    batch = prompts.shape[0]
    policy.eval()
    logits, cache = _prompt_cache(policy, prompts, prompt_mask)
    mask = prompt_mask
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, log_probs, response_mask = [], [], []
    for position in range(allowed.shape[0]):
        masked = (logits / temperature).masked_fill(~allowed[position], -torch.inf)
        logp = functional.log_softmax(masked, dim=-1)
        drawn = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        live = ~done
        token = torch.where(live, drawn, torch.full_like(drawn, pad_id))
        tokens.append(token)
        log_probs.append(torch.where(live, logp.gather(-1, drawn[:, None]).squeeze(-1), 0.0))
        response_mask.append(live.long())
        mask = torch.cat([mask, live.long()[:, None]], dim=1)
        done = done | (token == eos_id)
        if bool(done.all()) or position + 1 == allowed.shape[0]:
            break
        step_logits, cache = policy(token[:, None], mask, _positions(mask)[:, -1:], cache)
        logits = step_logits[:, -1, :]
    return Rollout.in_layout(
        prompts,
        prompt_mask,
        torch.stack(tokens, dim=1),
        torch.stack(response_mask, dim=1),
        torch.stack(log_probs, dim=1),
    )


def response_log_probs(
    policy: TinyCausalLM,
    *,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    allowed: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``responses`` and the entropy at each response position.

    Both ``[batch, response_length]``, 0 where ``response_mask`` is 0; the same
    masked distribution :func:`sample` drew from, with gradients.
    """
    length = responses.shape[1]
    prompt_length = input_ids.shape[1] - length
    first, cache = _prompt_cache(
        policy, input_ids[:, :prompt_length], attention_mask[:, :prompt_length]
    )
    logits = first[:, None, :]
    if length > 1:
        # Response token t predicts token t + 1; the last one predicts nothing.
        rest, _ = policy(
            responses[:, :-1],
            attention_mask[:, :-1],
            position_ids[:, prompt_length:-1],
            cache,
        )
        logits = torch.cat([logits, rest], dim=1)
    permitted = allowed[:length]
    logits = (logits / temperature).masked_fill(~permitted, -torch.inf)
    logp = functional.log_softmax(logits, dim=-1)
    live = response_mask.bool()
    # Padding tokens are not allowed anywhere (log-prob -inf): gather a real one there.
    picked = torch.where(live, responses, logits.argmax(dim=-1))
    chosen = logp.gather(-1, picked[..., None]).squeeze(-1)
    # Forbidden tokens have p = 0 and log p = -inf: 0 * -inf would be NaN (and so would
    # its gradient through a torch.where), so their log p is replaced by 0 before the product.
    entropy = -(logp.exp() * logp.masked_fill(~permitted, 0.0)).sum(dim=-1)
    zero = torch.zeros_like(chosen)
    return torch.where(live, chosen, zero), torch.where(live, entropy, zero)
