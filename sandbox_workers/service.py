"""The sandbox worker service: a consumer-group member that judges completions.

decode → resolve tests → execute (bounded) → emit reward → mark offset done.
An input offset is committed only after the reward for it (or its dead letter)
is acknowledged by the broker, so a crash redelivers and never loses; the
aggregator dedups the rare duplicate.

:func:`run_worker` waits for the topics, builds and starts what the worker needs
(producer, problems table, result cache, attempts ledger), and wires its two
halves, each built with its collaborators: the loop
(:mod:`sandbox_workers.worker_loop`: fetch, backpressure, commit, lag) and the
record judge (:mod:`sandbox_workers.record_judge`: decode → admit → resolve →
cache or run → emit → dead-letter; resolve → cache or run is
:mod:`sandbox_workers.judgement`).

Failures (the tree: :mod:`sandbox_workers.errors`). Input that does not decode,
names a foreign reply topic, or raises a non-retriable
:class:`~sandbox_workers.errors.SandboxWorkerError` goes to the DLQ with the
reason, and its offset moves on. A retriable one is tried again
(``transient_attempts``); if it persists, it is never dead-lettered: the record
stays uncommitted and the worker stops with the error, so the group redelivers
the record. Anything else is a bug in our code: logged with its traceback, the
worker stops the same way. Either stop drains the other in-flight records,
commits what is done and leaves the group; :func:`run_worker` then raises the
error (the CLI exits non-zero).

A record that keeps killing its worker (a bug it sets off, a crash, a wedge) is
quarantined: each start is counted in the attempts ledger before judging
(:mod:`sandbox_workers.attempts`), and once ``quarantine_after`` workers died on it
the next owner dead-letters it unjudged. Nothing a record carries can pin its
partition: rewards are summarised to fit their topic (:mod:`schemas.outcomes`), and
a response or program past ``max_program_chars`` is dead-lettered unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable

from kafkaio import (
    AioClients,
    Clients,
    DeadLetterWriter,
    Producer,
    running,
    wait_for_topics,
)
from sandbox_workers.attempts import Admission, AdmitAll, AttemptLedger, Quarantine
from sandbox_workers.judgement import Cached, CompletionRunner, Executions, Judging, Uncached
from sandbox_workers.metrics import WorkerMetrics
from sandbox_workers.problems import ProblemStore
from sandbox_workers.record_judge import RecordJudge, RewardUndeliverable
from sandbox_workers.result_cache import ClusterResultCache, LocalResultCache
from sandbox_workers.worker_config import WorkerConfig, WorkerStats
from sandbox_workers.worker_loop import WorkerLoop
from schemas import KafkaSettings

__all__ = [
    "CompletionRunner",
    "RewardUndeliverable",
    "WorkerConfig",
    "WorkerStats",
    "run_worker",
]

log = logging.getLogger(__name__)


async def run_worker(
    kafka: KafkaSettings,
    config: WorkerConfig,
    runner: CompletionRunner,
    *,
    shutdown: Awaitable[None],
    ready: asyncio.Event | None = None,
    stats: WorkerStats | None = None,
    clients: Clients | None = None,
) -> WorkerStats:
    """Consume completions and emit rewards until ``shutdown`` resolves, then drain and leave.

    ``clients`` makes the Kafka clients (default: :class:`~kafkaio.AioClients` for
    ``kafka``; unit tests pass a :class:`~kafkaio.FakeBroker`). Raises what stopped the
    worker early, after
    it has drained, committed and left: a retriable
    :class:`~sandbox_workers.errors.SandboxWorkerError` that outlasted its retries, a
    dead letter the DLQ refused, or a bug; the records it had not finished are
    redelivered to the group.
    """
    stats = stats if stats is not None else WorkerStats()
    clients = clients or AioClients(kafka)
    consumer = clients.consumer(config.consumer_options(config.group_id, config.in_flight_limit))
    producer = clients.producer(config.producer_options())
    await _await_topics(kafka, config, clients)
    async with running(producer), contextlib.AsyncExitStack() as stack:
        metrics = WorkerMetrics(config.worker_id, config.concurrency, runner.languages)
        stack.enter_context(metrics)  # its gauges live as long as the worker
        judging = await _judging(
            stack, kafka, config, runner=runner, clients=clients, producer=producer, metrics=metrics
        )
        admission = await _admission(stack, kafka, config, clients=clients, producer=producer)
        judge = RecordJudge(
            topics=kafka.topics,
            config=config,
            admission=admission,
            judging=judging,
            producer=producer,
            dead_letters=DeadLetterWriter(
                producer, kafka.topics.dlq, service=f"sandbox-worker:{config.worker_id}"
            ),
            stats=stats,
            metrics=metrics,
        )
        loop = WorkerLoop(
            config,
            consumer,
            judge=judge.judge,
            assigned=admission.caught_up,
            stats=stats,
            metrics=metrics,
        )
        failure = await loop.run(kafka.topics.completions, shutdown, ready)
    if failure is not None:
        raise failure
    log.info(
        "worker %s done: consumed=%d rewarded=%d dead_lettered=%d cache_hits=%d",
        config.worker_id,
        stats.consumed,
        stats.rewarded,
        stats.dead_lettered,
        stats.cache_hits,
    )
    return stats


async def _await_topics(kafka: KafkaSettings, config: WorkerConfig, clients: Clients) -> None:
    """Until the topics it reads exist: a member that subscribes to a topic not in
    the cluster yet is assigned nothing until its next metadata refresh (minutes),
    which is how a deployment's workers started beside its topic job sat idle."""
    t = kafka.topics
    names = [t.completions, t.problems, t.rewards, t.dlq]
    if config.result_cache_bytes > 0:
        names.append(t.result_cache)
    if config.quarantine_after > 0:
        names.append(t.attempts)
    admin = clients.admin()
    async with running(admin):
        await wait_for_topics(admin, names, timeout_s=config.topic_wait_s)


async def _judging(
    stack: contextlib.AsyncExitStack,
    kafka: KafkaSettings,
    config: WorkerConfig,
    *,
    runner: CompletionRunner,
    clients: Clients,
    producer: Producer,
    metrics: WorkerMetrics,
) -> Judging:
    """resolve → cache or run, its problems table (and result cache) started on ``stack``."""
    problems = await stack.enter_async_context(
        ProblemStore(kafka, max_bytes=config.problem_store_bytes, clients=clients)
    )
    executions = Executions(runner, config.concurrency, metrics)
    if config.result_cache_bytes <= 0:
        return Uncached(problems, executions)
    cache = await stack.enter_async_context(
        ClusterResultCache(
            kafka,
            LocalResultCache(config.result_cache_bytes),
            worker_id=config.worker_id,
            producer=producer,  # puts ride with the rewards
            clients=clients,
        )
    )
    return Cached(problems, executions, cache, runtime_version=config.runtime_version)


async def _admission(
    stack: contextlib.AsyncExitStack,
    kafka: KafkaSettings,
    config: WorkerConfig,
    *,
    clients: Clients,
    producer: Producer,
) -> Admission:
    """The quarantine (its attempts ledger started on ``stack``), or none when it is off."""
    if config.quarantine_after <= 0:
        return AdmitAll()
    ledger = await stack.enter_async_context(
        AttemptLedger(clients, producer, kafka.topics.attempts, worker_id=config.worker_id)
    )
    return Quarantine(ledger, after=config.quarantine_after)
