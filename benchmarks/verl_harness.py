"""verl's own reward loop, driven without Ray: configs, rollout DataProtos, timed calls.

The tests and ``benchmarks/bench_verl.py`` score samples the way verl's trainer
does: a ``RewardLoopWorker`` (verl's reward-loop actor class, used as a plain
object) built from verl's generated PPO trainer config, ``compute_score_batch``
on a ``DataProto`` of real token ids (the repository's character tokenizer), so
``run_single`` runs for every sample at once under ``asyncio.gather``. Two
backends are selected by config alone:

- rewardbus: ``RewardbusRewardManager`` loaded by verl's importlib loader;
- verl's default: the ``naive`` manager with ``default_compute_score`` (the
  ``prime_code`` path for code data sources), a sync function verl runs in the
  event loop's default thread pool (``run_in_executor(None, ...)``).

Needs the ``verl`` extra (verl, torch, omegaconf).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import verl
from omegaconf import DictConfig, OmegaConf
from verl import DataProto
from verl.utils.reward_score import default_compute_score

from benchmarks.verl_parity import ParityCase, ParitySample, verl_data_source
from rewardbus.tokenizer import build_tokenizer
from rewardbus.train_demo.rollout import rollout_dataproto, rollout_of
from schemas import KafkaSettings

__all__ = [
    "GENERATED_CONFIG",
    "RunSingleTimer",
    "parity_dataproto",
    "samples_dataproto",
    "verl_config",
    "verl_default_score",
]

GENERATED_CONFIG = Path(verl.__path__[0]) / "trainer/config/_generated_ppo_trainer.yaml"
PROMPT = "Solve it.\n"


def verl_config(
    tokenizer_dir: Path,
    kafka: KafkaSettings | None,
    *,
    options: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> DictConfig:
    """verl's generated PPO trainer config, with rewardbus as its reward manager.

    ``kafka=None`` leaves verl's reward defaults: the ``naive`` manager with
    ``default_compute_score``. ``options`` go to ``reward.reward_kwargs.rewardbus``;
    ``overrides`` are dotted config keys set last.
    """
    config = OmegaConf.load(GENERATED_CONFIG)
    if not isinstance(config, DictConfig):
        raise TypeError(f"{GENERATED_CONFIG} is not a mapping")
    config.actor_rollout_ref.model.path = str(tokenizer_dir)
    config.actor_rollout_ref.model.tokenizer_path = str(tokenizer_dir)
    if kafka is not None:
        settings = {
            "bootstrap_servers": kafka.bootstrap_servers,
            "topic_prefix": kafka.topics.prefix,
            **(options or {}),
        }
        config.reward.reward_manager.source = "importlib"
        config.reward.reward_manager.module.path = "pkg://consumers.verl_reward"
        config.reward.reward_manager.name = "RewardbusRewardManager"
        OmegaConf.update(config, "reward.reward_kwargs", {"rewardbus": settings}, force_add=True)
    for key, value in (overrides or {}).items():
        OmegaConf.update(config, key, value, force_add=True)
    return config


def samples_dataproto(
    samples: Sequence[Mapping[str, Any]], *, response_length: int | None = None
) -> DataProto:
    """A rollout batch as verl's trainer makes it (:func:`rollout_dataproto`'s layout).

    Each sample maps ``response``, ``data_source``, ``ground_truth`` and optionally
    ``extra_info`` and ``uid`` (default: pairs of samples share one). Responses are
    the repository tokenizer's ids plus ``<eos>``; ``response_length`` (default: the
    longest, plus ``<eos>``) truncates longer ones, as a rollout's length limit does.
    """
    tok = build_tokenizer()
    encoded = [tok.encode(s["response"], add_special_tokens=False) for s in samples]
    length = response_length or max(len(ids) for ids in encoded) + 1
    prompt_ids = tok.encode(PROMPT, add_special_tokens=False)
    rollout = rollout_of(
        [prompt_ids for _ in samples],
        [[*ids[: length - 1], tok.eos_token_id] for ids in encoded],
        pad_id=tok.pad_token_id,
        device=torch.device("cpu"),
        response_length=length,
    )
    batch: DataProto = rollout_dataproto(
        rollout,
        {
            "data_source": [s["data_source"] for s in samples],
            "reward_model": [{"ground_truth": s["ground_truth"], "style": "rule"} for s in samples],
            # verl's naive manager writes into extra_info: each batch gets its own copies.
            "extra_info": [copy.deepcopy(dict(s.get("extra_info") or {})) for s in samples],
            "uid": [s.get("uid", f"g{i // 2}") for i, s in enumerate(samples)],
        },
    )
    return batch


def parity_dataproto(samples: Sequence[ParitySample], *, for_verl: bool) -> DataProto:
    """The parity samples as one rollout batch, with rewardbus's or verl's ground truths.

    Both batches carry the same responses; verl's gets ``verl_ground_truth`` and a
    data source its ``default_compute_score`` knows. Raises ``ValueError`` for a
    response the character tokenizer cannot carry exactly (it would be judged as
    different text than the case holds).
    """
    tok = build_tokenizer()
    for sample in samples:
        ids = tok.encode(sample.response, add_special_tokens=False)
        if tok.decode(ids, skip_special_tokens=True) != sample.response:
            raise ValueError(f"case {sample.case.case_id}: response does not survive tokenizing")
    return samples_dataproto(
        [
            {
                "response": s.response,
                "data_source": verl_data_source(s.case) if for_verl else s.case.data_source,
                "ground_truth": s.case.verl_ground_truth if for_verl else s.case.ground_truth,
                "extra_info": s.case.extra_info,
                "uid": s.case.case_id,
            }
            for s in samples
        ]
    )


def verl_default_score(case: ParityCase, response: str | None = None) -> float:
    """verl's own score for a case: ``default_compute_score`` as its naive manager calls it."""
    result = default_compute_score(  # type: ignore[no-untyped-call]  # verl is untyped
        data_source=verl_data_source(case),
        solution_str=case.response if response is None else response,
        ground_truth=case.verl_ground_truth,
        extra_info=dict(case.extra_info),
    )
    return float(result["score"] if isinstance(result, dict) else result)


@dataclass
class RunSingleTimer:
    """Times every ``run_single`` of a reward manager: call to result, and how many overlap.

    :meth:`install` wraps the manager's bound method on the instance, so verl's
    own ``RewardLoopWorker.compute_score`` still makes the call.
    """

    latencies_ms: list[float] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def install(self, manager: Any) -> None:
        """Wrap ``manager.run_single`` (verl looks it up on the instance at each call)."""
        manager.run_single = self.wrap(manager.run_single)

    def wrap(
        self, run_single: Callable[[DataProto], Awaitable[dict[str, Any]]]
    ) -> Callable[[DataProto], Awaitable[dict[str, Any]]]:
        """``run_single`` with its latency recorded."""

        async def timed(data: DataProto) -> dict[str, Any]:
            started = time.perf_counter()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await run_single(data)
            finally:
                self.in_flight -= 1
                self.latencies_ms.append((time.perf_counter() - started) * 1000)

        return timed
