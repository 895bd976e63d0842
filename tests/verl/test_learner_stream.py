"""The streaming learner on the real broker: a bounded rollout window, scored DataProtos out.

Sandbox worker processes judge real programs, the aggregator scores the batches,
and the learner side turns them into verl DataProtos while the rollout side is
held to two batches in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from verl import DataProto

from consumers import LearnerBatch, LearnerSource, ScoredBatches, StalenessPolicy
from producers import BatchWindow, RolloutProducer
from rewardbus.runtime.local import WorkerPoolOptions, aggregator, worker_pool
from rewardbus.topics import ensure_topics
from schemas import BatchManifest, Completion, IoSuite, KafkaSettings
from tests.support.poll import until

pytestmark = pytest.mark.integration

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
SUB = "a, b = map(int, input().split())\nprint(a - b)\n"
SUITE = IoSuite(inputs=["2 3\n", "10 -4\n"], outputs=["5\n", "6\n"])
GROUP = 2  # samples per prompt
PROMPTS = 2  # prompts per batch


def completions(batch_id: str, version: int) -> list[Completion]:
    """Even samples add (accepted), odd ones subtract (wrong answer); distinct programs."""
    return [
        Completion(
            sample_id=f"{batch_id}-s{i}",
            batch_id=batch_id,
            group_id=f"{batch_id}-g{i // GROUP}",
            policy_version=version,
            code=f"# {batch_id} sample {i}\n" + (ADD if i % 2 == 0 else SUB),
            tests=SUITE,
        )
        for i in range(GROUP * PROMPTS)
    ]


def manifest(batch_id: str, batch: list[Completion], version: int) -> BatchManifest:
    return BatchManifest(
        batch_id=batch_id,
        sample_ids=[c.sample_id for c in batch],
        group_ids=[c.group_id for c in batch],
        group_size=GROUP,
        policy_version=version,
        deadline=time.time() + 120,
    )


def rollout(batch: list[Completion], seed: int) -> DataProto:
    """What a rollout worker would hand back: token ids and masks, rows in its own order."""
    rng = random.Random(seed)
    rows = list(batch)
    rng.shuffle(rows)
    n, prompt_len, response_len = len(rows), 4, 6
    response_mask = torch.zeros(n, response_len, dtype=torch.int64)
    for row in range(n):
        response_mask[row, : rng.randint(1, response_len)] = 1
    prompts = torch.randint(3, 50, (n, prompt_len))
    responses = torch.randint(3, 50, (n, response_len)) * response_mask
    attention_mask = torch.cat([torch.ones(n, prompt_len, dtype=torch.int64), response_mask], 1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention_mask,
            "position_ids": attention_mask.cumsum(1) - 1,
        },
        non_tensors={
            "uid": np.array([c.group_id for c in rows], dtype=object),
            "sample_id": np.array([c.sample_id for c in rows], dtype=object),
        },
    )


async def test_the_third_batch_waits_until_a_scored_batch_is_consumed(
    kafka: KafkaSettings, tmp_path: Path
) -> None:
    await ensure_topics(kafka, partitions=2)
    prefix = kafka.topics.prefix
    window = BatchWindow(max_in_flight=2)
    batch_ids = ["b0", "b1", "b2"]
    published: list[str] = []
    workers = WorkerPoolOptions(workers=1, group_id=f"{prefix}workers", log_dir=tmp_path)
    async with (
        aggregator(kafka, f"{prefix}agg"),
        worker_pool(kafka, workers),
        ScoredBatches(kafka, group_id=f"{prefix}learner") as scored,
        ScoredBatches(kafka) as observer,  # an independent reader of the scored topic
        RolloutProducer(kafka) as producer,
    ):
        # Batch i comes from policy i; the learner trains policy 2 and accepts a lag of 1.
        learn = LearnerSource.for_verl(
            scored,
            max_in_flight=2,
            release=window.release,
            staleness=StalenessPolicy(max_staleness=1),
            learner_version=2,
        )

        async def rollout_side() -> None:
            for version, batch_id in enumerate(batch_ids):
                await window.acquire(batch_id)  # the backpressure under test
                batch = completions(batch_id, version)
                learn.hold(batch_id, rollout(batch, seed=version))
                await producer.publish_manifest(manifest(batch_id, batch, version))
                await producer.publish_many(batch)
                published.append(batch_id)

        publisher = asyncio.create_task(rollout_side())
        try:
            # The first two batches are judged, scored and on the topic...
            seen = {(await observer.next(timeout=120)).batch_id for _ in range(2)}
            assert seen == {"b0", "b1"}
            await until(
                lambda: published == ["b0", "b1"], "the publisher to see its acks", timeout_s=10
            )
            # ...and still the third is not published: nobody consumed a scored batch, so
            # nothing released a slot (the window is the only way past acquire()).
            assert not publisher.done() and published == ["b0", "b1"]
            assert window.full and window.in_flight == ("b0", "b1")

            got: dict[str, LearnerBatch[DataProto]] = {}
            first = await learn.next(timeout=60)
            got[first.batch_id] = first
            await until(
                lambda: published == batch_ids, "the third batch to be published", timeout_s=60
            )
            for _ in range(2):
                batch = await learn.next(timeout=120)
                got[batch.batch_id] = batch
            await asyncio.wait_for(publisher, timeout=10)
        finally:
            publisher.cancel()

    assert set(got) == set(batch_ids) and window.in_flight == () and learn.in_flight == ()
    for batch_id, item in got.items():
        data = item.data
        sample_ids = data.non_tensor_batch["sample_id"].tolist()
        scores = dict(zip(sample_ids, data.batch["token_level_scores"].sum(-1), strict=True))
        # Real judging: the adders pass both tests, the subtractors fail both.
        assert all(
            float(s) == (1.0 if sid.endswith(("s0", "s2")) else 0.0) for sid, s in scores.items()
        )
        masked = torch.all(data.batch["response_mask"] == 0, dim=-1)
        if batch_id == "b0":  # policy 0 is two versions behind the learner: dropped
            assert item.counters.stale_dropped == GROUP * PROMPTS and bool(masked.all())
            assert torch.all(data.batch["advantages"] == 0)
        else:
            assert item.counters.trained == GROUP * PROMPTS and not bool(masked.any())
            by_id = {s.sample_id: s.advantage for s in item.scored.samples}
            expected = torch.tensor(
                [by_id[sid] for sid in data.non_tensor_batch["sample_id"]], dtype=torch.float32
            )
            assert torch.allclose(
                data.batch["advantages"].sum(-1), expected * data.batch["response_mask"].sum(-1)
            )
    assert learn.counters.batches == 3 and learn.counters.stale_dropped == GROUP * PROMPTS
