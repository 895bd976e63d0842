"""Kafka's floor for the pipeline: a relay that judges nothing (a measurement, not a worker).

One process of it stands where a sandbox worker stands in ``bench_layers.py``'s
pipeline: a consumer in the workers' group on the completions topic and a producer
with the worker's own options (``WorkerConfig.consumer_options`` and
``producer_options``: acks from every replica, idempotent, no linger), one record at
a time as a worker of concurrency 1 takes them, at most one every ``PERIOD_MS``
(asleep until its turn: a worker of the measured pipeline took that long per
completion, and the broker's and the clients' cost per completion depends on the
rate, their polls go on while a record is judged), each answered by a reward
event whose delivery it awaits before the next, offsets committed every
``commit_interval_s``. The event is a placeholder (``sandbox_error``, "not judged:
the Kafka relay of bench_layers"): nothing runs. What this costs the relay's
process and the broker per completion is what the Kafka clients and the broker
cost a pipeline before any decoding past the completion's, any ledger, span,
cache or judging of ours; ``bench_layers.py`` prints it beside the layers.

    python benchmarks/_relay.py BOOTSTRAP TOPIC_PREFIX GROUP_ID RELAY_ID PERIOD_MS

Prints ``ready`` once it holds partitions, runs until SIGTERM, then commits and
leaves the group.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from kafkaio import AioClients, TopicPartition, running
from sandbox_workers.worker_config import WorkerConfig
from schemas import Completion, KafkaSettings, RewardEvent, Topics, Verdict
from schemas.codec import decode, encode
from schemas.headers import CONTENT_TYPE

NOT_JUDGED = "not judged: the Kafka relay of bench_layers"


async def relay(bootstrap: str, prefix: str, group_id: str, relay_id: str, period_ms: str) -> None:
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, topics=Topics(prefix=prefix), client_id=relay_id
    )
    config = WorkerConfig(group_id=group_id, worker_id=relay_id)
    clients = AioClients(kafka)
    consumer = clients.consumer(config.consumer_options(group_id, config.in_flight_limit))
    producer = clients.producer(config.producer_options())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with running(producer), running(consumer):
        consumer.subscribe([kafka.topics.completions])
        done: dict[TopicPartition, int] = {}
        committed_at = time.monotonic()
        said_ready = False
        period_s = float(period_ms) / 1000
        due = 0.0  # when the next record may be answered
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=100, max_records=config.in_flight_limit)
            if not said_ready and consumer.assignment():
                print("ready", flush=True)
                said_ready = True
            for tp, records in batches.items():
                for record in records:
                    completion = decode(record.value, Completion)
                    now = time.monotonic()
                    due = max(due + period_s, now)
                    await asyncio.sleep(due - now)
                    event = RewardEvent(
                        sample_id=completion.sample_id,
                        batch_id=completion.batch_id,
                        group_id=completion.group_id,
                        policy_version=completion.policy_version,
                        verdict=Verdict.SANDBOX_ERROR,
                        message=NOT_JUDGED,
                        worker_id=relay_id,
                    )
                    delivery = await producer.send(
                        completion.reply_topic or kafka.topics.rewards,
                        encode(event),
                        key=completion.batch_id.encode(),
                        headers=[CONTENT_TYPE],
                    )
                    await delivery
                    done[tp] = record.offset + 1
            if done and time.monotonic() - committed_at >= config.commit_interval_s:
                await consumer.commit(done)
                done, committed_at = {}, time.monotonic()
        if done:
            await consumer.commit(done)


if __name__ == "__main__":
    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # its rebalance chatter
    asyncio.run(relay(*sys.argv[1:6]))
