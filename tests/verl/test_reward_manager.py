"""verl's own loader and reward-loop worker score DataProtos through rewardbus.

Nothing here calls our manager directly: verl's ``RewardLoopWorker`` builds it (or
our ``compute_score``) from a verl config and calls it on a ``DataProto`` of real
token ids from the repository's tokenizer, against the real broker and real
sandbox worker processes.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from aiokafka.admin import AIOKafkaAdminClient
from omegaconf import DictConfig
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

import consumers.reward_client as reward_client
import consumers.verl_reward as verl_reward
from benchmarks.verl_harness import samples_dataproto, verl_config
from consumers.reward_client import RewardClient
from consumers.verl_tasks import REWARD_EXTRA_KEYS, VerlRewardSettings, task_from_verl
from rewardbus.topics import ensure_topics
from schemas import KafkaSettings, RewardEvent, decode
from tests.support.poll import until
from tests.support.reading import read_topic

SUM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
DIFF = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
SUM_GT = json.dumps({"inputs": ["1 2\n", "5 5\n", "7 0\n"], "outputs": ["3\n", "10\n", "7\n"]})
CALL_GT = json.dumps({"fn_name": "add", "inputs": ["1\n2", "3\n4"], "outputs": ["3", "7"]})
CALL = "```python\ndef add(a, b):\n    return a + b\n```"
MBPP_GT = {"test_list": ["assert sq(2) == 4", "assert sq(3) == 9", "assert sq(0) == 1"]}
SQUARE = "def sq(x):\n    return x * x\n"


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fresh_rewardbus_manager")]


def _verl_config(tokenizer_dir: Path, kafka: KafkaSettings, **reward: Any) -> DictConfig:
    """verl's generated PPO trainer config, with our reward backend selected."""
    options = reward.pop("options", {})
    return verl_config(tokenizer_dir, kafka, options=options, overrides=reward)


async def test_verl_loader_builds_our_manager_and_its_reward_loop_scores_through_rewardbus(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    worker = RewardLoopWorker(_verl_config(verl_tokenizer_dir, verl_sandbox_workers))
    assert type(worker.reward_manager).__name__ == "RewardbusRewardManager"
    samples = [
        {"data_source": "apps", "response": SUM, "ground_truth": SUM_GT},
        {"data_source": "apps", "response": DIFF, "ground_truth": SUM_GT},
        {"data_source": "taco", "response": CALL, "ground_truth": CALL_GT},
        {"data_source": "mbpp", "response": SQUARE, "ground_truth": MBPP_GT},
        {"data_source": "codecontests", "response": "I cannot solve this.", "ground_truth": SUM_GT},
    ]
    outputs = await worker.compute_score_batch(samples_dataproto(samples))
    scores = [round(o["reward_score"], 3) for o in outputs]
    assert scores == [1.0, round(1 / 3, 3), 1.0, round(2 / 3, 3), 0.0]
    infos = [o["reward_extra_info"] for o in outputs]
    assert [i["verdict"] for i in infos] == [
        "accepted", "wrong_answer", "accepted", "wrong_answer", "compile_error",
    ]  # fmt: skip
    assert all(tuple(i) == REWARD_EXTRA_KEYS for i in infos)  # verl reads the first's keys
    assert [i["passed"] for i in infos[:4]] == [3, 1, 2, 2]
    assert not any(i["infra_failure"] or i["timed_out"] for i in infos)


async def test_a_grpo_group_publishes_its_suite_once(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    worker = RewardLoopWorker(_verl_config(verl_tokenizer_dir, verl_sandbox_workers))
    group = [
        {"data_source": "apps", "response": r, "ground_truth": SUM_GT, "uid": "prompt-1"}
        for r in (SUM, DIFF, SUM, "```python\nprint(3)\n```", SUM, DIFF, SUM, SUM)
    ]
    outputs = await worker.compute_score_batch(samples_dataproto(group))
    assert [round(o["reward_score"], 2) for o in outputs] == [1, 0.33, 1, 0.33, 1, 0.33, 1, 1]
    client = await verl_reward._clients(worker.reward_manager.settings).get()
    assert client.stats.problems_published == 1
    assert client.stats.published >= 8


async def test_custom_reward_function_path_uses_the_same_client(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    options = {
        "bootstrap_servers": verl_sandbox_workers.bootstrap_servers,
        "topic_prefix": verl_sandbox_workers.topics.prefix,
    }
    config = _verl_config(
        verl_tokenizer_dir,
        verl_sandbox_workers,
        **{
            "reward.reward_manager.source": "register",
            "reward.reward_manager.name": "naive",
            "reward.custom_reward_function.path": verl_reward.__file__,
            "reward.custom_reward_function.name": "compute_score",
            "reward.custom_reward_function.reward_kwargs": options,
        },
    )
    worker = RewardLoopWorker(config)
    samples = [
        {"data_source": "apps", "response": SUM, "ground_truth": SUM_GT},
        {"data_source": "apps", "response": DIFF, "ground_truth": SUM_GT},
    ]
    outputs = await worker.compute_score_batch(samples_dataproto(samples))
    assert [round(o["reward_score"], 3) for o in outputs] == [1.0, round(1 / 3, 3)]
    assert outputs[0]["reward_extra_info"]["verdict"] == "accepted"
    assert outputs[1]["reward_extra_info"]["passed"] == 1
    # verl loaded compute_score from its file, a second copy of the module: the
    # client is still the one process-wide client for these settings.
    (shared,) = reward_client._PROCESS_CLIENTS.values()
    assert (await shared.get()).stats.published == 2


async def test_a_reward_that_never_comes_is_flagged_not_raised(
    kafka: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    """No worker serves these topics: each sample times out, flagged, with the chosen score."""
    await ensure_topics(kafka, partitions=1)
    options = {"sample_timeout_s": 2.0, "failure_score": -1.0}
    worker = RewardLoopWorker(_verl_config(verl_tokenizer_dir, kafka, options=options))
    samples = [{"data_source": "apps", "response": SUM, "ground_truth": SUM_GT}] * 3
    started = time.monotonic()
    outputs = await worker.compute_score_batch(samples_dataproto(samples))
    assert time.monotonic() - started < 15
    assert [o["reward_score"] for o in outputs] == [-1.0, -1.0, -1.0]
    assert all(o["reward_extra_info"]["timed_out"] for o in outputs)
    assert all(o["reward_extra_info"]["infra_failure"] for o in outputs)
    client = await verl_reward._clients(worker.reward_manager.settings).get()
    assert client.stats.timeouts == 3


async def test_a_ground_truth_that_is_no_suite_is_flagged_and_the_rest_scored(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    worker = RewardLoopWorker(_verl_config(verl_tokenizer_dir, verl_sandbox_workers))
    samples = [
        {"data_source": "apps", "response": SUM, "ground_truth": "not json at all"},
        {"data_source": "apps", "response": SUM, "ground_truth": SUM_GT},
    ]
    outputs = await worker.compute_score_batch(samples_dataproto(samples))
    assert outputs[0]["reward_score"] == 0.0
    assert outputs[0]["reward_extra_info"]["verdict"] == "invalid_input"
    assert outputs[0]["reward_extra_info"]["infra_failure"]
    assert outputs[1]["reward_score"] == 1.0


async def test_each_process_reads_only_its_own_rewards(
    verl_sandbox_workers: KafkaSettings,
) -> None:
    """Two clients (two reward-loop processes): each reply topic holds only its client's rewards."""
    workers = verl_sandbox_workers
    settings = VerlRewardSettings(workers.bootstrap_servers, topic_prefix=workers.topics.prefix)
    async with RewardClient(workers) as first, RewardClient(workers) as second:
        assert first.reply_topic != second.reply_topic
        tasks = {
            client: [
                task_from_verl(
                    sample_id=f"{name}-{i}",
                    solution_str=SUM if i % 2 else DIFF,
                    ground_truth=SUM_GT,
                    extra_info={},
                    settings=settings,
                )
                for i in range(6)
            ]
            for client, name in ((first, "a"), (second, "b"))
        }
        events = await asyncio.gather(
            *(
                client.score(t.completion, t.problem, timeout_s=60)
                for client, ts in tasks.items()
                for t in ts
            )
        )
        assert {e.sample_id for e in events} == {f"{n}-{i}" for n in "ab" for i in range(6)}
        for client, prefix in ((first, "a-"), (second, "b-")):
            # Every reply was on the topic before its score() returned.
            on_topic = [
                decode(v, RewardEvent) for v in await read_topic(workers, client.reply_topic)
            ]
            assert {e.sample_id for e in on_topic} == {f"{prefix}{i}" for i in range(6)}
        reply_topics = (first.reply_topic, second.reply_topic)

    async def deleted() -> bool:
        return not set(reply_topics) & set(await _topic_names(workers))

    # Deletion completes asynchronously on the broker.
    await until(deleted, "the reply topics to be deleted at stop", timeout_s=20, every_s=0.2)


async def _topic_names(kafka: KafkaSettings) -> list[str]:
    admin = AIOKafkaAdminClient(**kafka.client_kwargs())
    await admin.start()
    try:
        names: list[str] = await admin.list_topics()
        return names
    finally:
        await admin.close()


def test_verl_reward_loop_manager_on_ray_scores_through_rewardbus(
    verl_sandbox_workers: KafkaSettings, verl_tokenizer_dir: Path
) -> None:
    """verl's trainer-side RewardLoopManager: Ray actors, one client and reply topic each."""
    import ray
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager

    config = _verl_config(verl_tokenizer_dir, verl_sandbox_workers, **{"reward.num_workers": 2})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        manager = RewardLoopManager(config)
        samples = [
            {"data_source": "apps", "response": r, "ground_truth": SUM_GT, "uid": f"p{i // 3}"}
            for i, r in enumerate([SUM, DIFF, SUM] * 2)
        ]
        data = samples_dataproto(samples)
        result = manager.compute_rm_score(data)
    finally:
        ray.shutdown()
    scores = result.batch["rm_scores"]
    # Each score sits at the sample's last valid response token, as verl expects.
    valid = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :].sum(dim=1)
    placed = scores[torch.arange(len(samples)), valid - 1]
    assert [round(float(s), 3) for s in placed] == [1.0, 0.333, 1.0] * 2
    assert float(scores.sum()) == pytest.approx(float(placed.sum()))
    assert list(result.non_tensor_batch["verdict"]) == ["accepted", "wrong_answer", "accepted"] * 2
    assert result.meta_info["reward_extra_keys"] == list(REWARD_EXTRA_KEYS)
