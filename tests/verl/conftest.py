"""Fixtures shared by the verl tests: the tokenizer directory, sandbox workers, manager state."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import consumers.reward_client as reward_client
import consumers.verl_reward as verl_reward
from rewardbus.runtime.local import WorkerPoolOptions, worker_pool
from rewardbus.tokenizer import save_tokenizer
from rewardbus.topics import ensure_topics
from schemas import KafkaSettings, Topics


@pytest.fixture(scope="module")
def verl_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's tokenizer saved where verl's ``hf_tokenizer`` loads it offline."""
    return save_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
async def verl_sandbox_workers(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[KafkaSettings]:
    """Two real sandbox worker processes (strict sandbox) serving this module's own topics."""
    topics = Topics(prefix=f"verl{uuid.uuid4().hex[:10]}.")
    kafka = KafkaSettings(kafka_bootstrap, topics=topics, client_id="verl-test")
    await ensure_topics(kafka, partitions=2)
    options = WorkerPoolOptions(
        workers=2,
        group_id=f"{topics.prefix}workers",
        log_dir=tmp_path_factory.mktemp("worker-logs"),
    )
    async with worker_pool(kafka, options):
        yield kafka


@pytest.fixture
async def fresh_rewardbus_manager() -> AsyncIterator[None]:
    """Each test's verl config builds its own manager settings and clients; stopped after it."""
    yield
    await _forget_rewardbus_manager()


@pytest.fixture(scope="module")
async def rewardbus_manager_for_module() -> AsyncIterator[None]:
    """The same for a module whose tests share one scoring run."""
    yield
    await _forget_rewardbus_manager()


async def _forget_rewardbus_manager() -> None:
    # init_class runs once per class per process: the next config must run it again.
    verl_reward.RewardbusRewardManager._class_initialized = False
    verl_reward.RewardbusRewardManager.settings = None
    for shared in reward_client._PROCESS_CLIENTS.values():
        await shared.aclose()
    reward_client._PROCESS_CLIENTS.clear()
