"""The train demo's policy: a tiny causal transformer, built from a local config, random init.

Plain torch (no downloads, no transformers model classes), so the same module runs
in the CPU demo and in the self-contained GPU benchmark. Left-padded prompts are
handled the way verl lays batches out: ``attention_mask`` marks real tokens and
``position_ids`` count only those.

``forward`` takes and returns a key/value cache. A step's samples share a few
prompts (a GRPO group is one prompt, many samples), so the rollout and the
learner run each distinct prompt once and continue every sample from its
prompt's cache: on two CPU cores that is most of the cost of a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional

__all__ = ["KVCache", "PolicyConfig", "TinyCausalLM", "build_policy", "select_rows"]

# Per layer, keys and values of shape [batch, heads, positions, head_dim].
KVCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class PolicyConfig:
    """Shape of the policy network."""

    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_positions: int = 64
    init_std: float = 0.02

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be a multiple of n_heads")


class _Block(nn.Module):
    """Pre-norm attention + MLP."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.heads = config.n_heads
        self.norm_attention = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model),
            nn.GELU(),
            nn.Linear(4 * config.d_model, config.d_model),
        )

    def forward(
        self,
        hidden: torch.Tensor,
        allowed: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, length, width = hidden.shape
        qkv = self.qkv(self.norm_attention(hidden))
        q, k, v = (
            part.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
            for part in qkv.split(width, dim=-1)
        )
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        attended = functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        hidden = hidden + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        result: torch.Tensor = hidden + self.mlp(self.norm_mlp(hidden))
        return result, (k, v)


class TinyCausalLM(nn.Module):
    """Token + position embeddings, a few pre-norm blocks, tied output projection."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.max_positions, config.d_model)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.apply(self._init)
        # GPT-2's scaled init of residual projections keeps early outputs near uniform.
        for block in self.blocks:
            assert isinstance(block, _Block)
            for projection in (block.out, block.mlp[-1]):
                assert isinstance(projection, nn.Linear)
                nn.init.normal_(
                    projection.weight, std=config.init_std / math.sqrt(2 * config.n_layers)
                )

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=self.config.init_std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: KVCache | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Logits ``[batch, length, vocab]`` for ``input_ids``, and the extended cache.

        ``attention_mask`` covers the cached positions and then ``input_ids``
        (``[batch, cached + length]``); ``position_ids`` covers ``input_ids`` only.
        """
        length = input_ids.shape[1]
        cached = 0 if past is None else past[0][0].shape[2]
        device = input_ids.device
        queries = torch.arange(cached, cached + length, device=device)[:, None]
        keys = torch.arange(cached + length, device=device)[None, :]
        # Padding rows may always see themselves, so no row is fully masked (NaN).
        allowed = ((keys <= queries) & attention_mask.bool()[:, None, None, :]) | (keys == queries)
        hidden = self.tokens(input_ids) + self.positions(position_ids.clamp(min=0))
        cache: KVCache = []
        for index, block in enumerate(self.blocks):
            hidden, layer_cache = block(hidden, allowed, None if past is None else past[index])
            cache.append(layer_cache)
        logits: torch.Tensor = self.norm(hidden) @ self.tokens.weight.T
        return logits, cache


def select_rows(cache: KVCache, index: torch.Tensor) -> KVCache:
    """The cache of rows ``index`` (differentiable: used to share a prompt between samples)."""
    return [(k.index_select(0, index), v.index_select(0, index)) for k, v in cache]


def build_policy(config: PolicyConfig, *, seed: int, device: torch.device) -> TinyCausalLM:
    """A freshly initialised policy on ``device``; the same seed gives the same weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        policy = TinyCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    return policy.to(device)
