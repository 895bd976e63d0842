"""rewardbus as verl's reward backend: a reward-loop manager and an async ``compute_score``.

Either one is selected with verl config alone (docs/verl.md has the commands):

- the manager::

      reward.reward_manager.source=importlib
      reward.reward_manager.module.path=pkg://consumers.verl_reward
      reward.reward_manager.name=RewardbusRewardManager
      +reward.reward_kwargs.rewardbus.bootstrap_servers=kafka:9092

  (or ``reward.reward_manager.name=rewardbus`` with ``source=register`` where this
  module is imported before verl builds its config: importing it registers it);

- the function::

      reward.custom_reward_function.path=pkg://consumers.verl_reward   # or this file's path
      reward.custom_reward_function.name=compute_score
      +reward.custom_reward_function.reward_kwargs.bootstrap_servers=kafka:9092

Both share one :class:`~consumers.reward_client.RewardClient` per process and event
loop. No sample ever raises into verl's step: a reward that does not come within
``sample_timeout_s``, a ``sandbox_error``, a ground truth that is no test suite, or
a broker that refuses the publish all give ``failure_score`` with
``reward_extra_info["infra_failure"]`` set, and are counted.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping
from typing import Any, ClassVar

from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER, register

from consumers.reward_client import RewardClientConfig, SharedRewardClients, process_clients
from consumers.verl_tasks import (
    SETTING_KEYS,
    VerlInputError,
    VerlRewardSettings,
    failure_result,
    reward_result,
    task_from_verl,
)
from kafkaio import KafkaIOError
from producers import PublishError
from schemas import KafkaSettings, Topics, Verdict

__all__ = ["RewardbusRewardManager", "compute_score", "score_sample"]

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_meter = metrics.get_meter(__name__)
_results = _meter.create_counter(
    "rewardbus.verl.rewards", description="rewards handed to verl, by verdict and failure"
)
_lengths = _meter.create_histogram(
    "rewardbus.verl.response_length",
    unit="{token}",
    description="valid response tokens of each sample verl hands the manager",
    explicit_bucket_boundaries_advisory=tuple(float(2**k) for k in range(4, 15)),  # 16..16384
)


def _clients(settings: VerlRewardSettings) -> SharedRewardClients:
    """The process's clients for these settings (shared by managers and compute_score)."""

    def make() -> SharedRewardClients:
        kafka = KafkaSettings(
            bootstrap_servers=settings.bootstrap_servers,
            topics=Topics(prefix=settings.topic_prefix),
            client_id="rewardbus-verl",
            security_protocol=settings.security_protocol,
        )
        config = RewardClientConfig(
            max_in_flight=settings.max_in_flight,
            reply_replication_factor=settings.reply_replication_factor,
        )
        return SharedRewardClients(kafka, config)

    return process_clients(settings, make)


async def score_sample(
    settings: VerlRewardSettings,
    *,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None,
    data_source: str = "",
    group_id: str = "",
    policy_version: int = 0,
    response_length: int | None = None,
) -> dict[str, Any]:
    """One sample's ``{"reward_score", "reward_extra_info"}``; never raises for a sample.

    ``response_length`` (tokens, where the caller knows it) travels with the
    completion, so the workers' metrics see it next to the verdict.
    """
    try:
        task = task_from_verl(
            sample_id=uuid.uuid4().hex,
            solution_str=solution_str,
            ground_truth=ground_truth,
            extra_info=extra_info,
            settings=settings,
            data_source=data_source,
            group_id=group_id,
            policy_version=policy_version,
            response_length=response_length,
        )
    except VerlInputError as exc:
        log.warning("sample of %s not judged: %s", data_source or "?", exc.reason)
        return _counted(failure_result("invalid_input", settings, timed_out=False))
    # A child of whatever span the trainer has open (its step, its rollout): the
    # sample's publish, judging and reward join the trainer's trace under it.
    attributes: dict[str, str | int] = {
        "rewardbus.sample_id": task.completion.sample_id,
        "rewardbus.data_source": data_source,
        "rewardbus.group_id": group_id,
        "rewardbus.policy_version": policy_version,
    }
    with _tracer.start_as_current_span(
        "score sample", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        try:
            client = await _clients(settings).get()
            event = await client.score(
                task.completion, task.problem, timeout_s=settings.sample_timeout_s
            )
        except TimeoutError:
            log.warning("no reward within %.0f s (%s)", settings.sample_timeout_s, data_source)
            span.set_status(Status(StatusCode.ERROR, "no reward in time"))
            return _counted(failure_result("timeout", settings, timed_out=True))
        except (KafkaIOError, PublishError) as exc:  # the client's start, or the publish
            log.warning("publishing a %s sample failed: %s", data_source, exc.reason)
            span.set_status(Status(StatusCode.ERROR, exc.reason))
            return _counted(failure_result(str(Verdict.SANDBOX_ERROR), settings, timed_out=False))
        span.set_attribute("rewardbus.verdict", str(event.verdict))
        span.set_attribute("rewardbus.score", event.score)
        return _counted(reward_result(event, settings))


def _counted(result: dict[str, Any]) -> dict[str, Any]:
    info = result["reward_extra_info"]
    _results.add(1, {"verdict": info["verdict"], "infra_failure": info["infra_failure"]})
    return result


def _options(config: Any) -> dict[str, Any]:
    """``reward.reward_kwargs.rewardbus`` of verl's config, as a plain dict."""
    reward = config.get("reward") if hasattr(config, "get") else None
    kwargs = reward.get("reward_kwargs") if reward is not None else None
    options = kwargs.get("rewardbus") if kwargs is not None else None
    if options is None:
        return {}
    return {str(key): value for key, value in dict(options).items()}


class RewardbusRewardManager(RewardManagerBase):
    """verl reward-loop manager that judges every sample through rewardbus.

    verl builds it as ``cls(config=, tokenizer=, compute_score=,
    reward_router_address=, reward_model_tokenizer=)``; ``compute_score`` and the
    reward model arguments are accepted and unused (rewardbus is the scorer).
    """

    settings: ClassVar[VerlRewardSettings | None] = None

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any = None,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **_: Any,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        """Once per class per process: read the settings and name the shared client."""
        if cls._class_initialized:
            return
        cls.settings = VerlRewardSettings.from_options(_options(config), os.environ)
        _clients(cls.settings)
        cls._class_initialized = True

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        """Score the last sequence of a one-sample DataProto, as verl's managers do."""
        item = data[-1:][0]
        response_ids = item.batch["responses"]
        valid = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        tokenizer: Any = self.tokenizer  # verl annotates the class, passes an instance
        solution = tokenizer.decode(response_ids[:valid], skip_special_tokens=True)
        _lengths.record(valid)
        non_tensor = item.non_tensor_batch
        reward_model = non_tensor.get("reward_model") or {}
        settings = self.settings
        if settings is None:
            raise RuntimeError("init_class did not run")
        return await score_sample(
            settings,
            solution_str=solution,
            ground_truth=reward_model.get("ground_truth"),
            extra_info=non_tensor.get("extra_info") or {},
            data_source=str(non_tensor.get("data_source", "")),
            group_id=str(non_tensor.get("uid", "")),
            policy_version=int(data.meta_info.get("global_steps", 0) or 0),
            response_length=valid,
        )


if "rewardbus" not in REWARD_MANAGER:  # loading this file twice by path must not clash
    register("rewardbus")(RewardbusRewardManager)


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **reward_kwargs: Any,
) -> dict[str, Any]:
    """verl ``custom_reward_function``: the score and rewardbus's verdict details.

    ``reward_kwargs`` (from ``reward.custom_reward_function.reward_kwargs``) take the
    same options as the manager; verl's own extra arguments are ignored.
    """
    options = {k: v for k, v in reward_kwargs.items() if k in SETTING_KEYS}
    settings = VerlRewardSettings.from_options(options, os.environ)
    result = await score_sample(
        settings,
        solution_str=solution_str,
        ground_truth=ground_truth,
        extra_info=extra_info,
        data_source=data_source,
    )
    return {"score": result["reward_score"], **result["reward_extra_info"]}
