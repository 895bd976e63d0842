"""``rewardbus train-demo``: generate, score through the real pipeline, update; repeat.

Per step: the policy samples ``group_size`` responses for every task of the
family; they go out as ``Completion``s with a ``BatchManifest`` (group ids = the
GRPO ``uid``) through ``RolloutProducer``; sandbox worker processes judge them
(strict sandbox by default) and the aggregator emits the step's ``ScoredBatch``;
``scored_batch_to_dataproto`` turns it and the rollout into verl's ``DataProto``
(GRPO advantages, masked rows zeroed); verl's policy loss updates the policy.
Nothing scores a sample in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field

import torch

from consumers import ScoredBatches
from consumers.verl_batch import scored_batch_to_dataproto
from producers import RolloutProducer
from rewardbus.local import embedded_broker, local_pipeline
from rewardbus.train_demo.completions import step_samples
from rewardbus.train_demo.devices import empty_cache, resolve_device
from rewardbus.train_demo.learner import UpdateMetrics
from rewardbus.train_demo.monitor import AlertCounters, AlertMonitor, StepRecord
from rewardbus.train_demo.options import TrainDemoOptions
from rewardbus.train_demo.report import (
    RunFacts,
    print_summary,
    progress_line,
    say,
    summary,
    write_plot,
)
from rewardbus.train_demo.tasks import Task, task_family
from rewardbus.train_demo.trainer import Trainer, TrainerSetup, rollout_dataproto
from rewardbus.train_demo.verl_loss import verl_aggregate, verl_policy_loss
from schemas import KafkaSettings, ScoredBatch, Topics

__all__ = ["run_train_demo"]

log = logging.getLogger(__name__)


@dataclass
class _Run:
    """What the loop accumulates (mutable, private to this module)."""

    records: list[StepRecord] = field(default_factory=list)
    verdicts: Counter[str] = field(default_factory=Counter)
    monitor: AlertMonitor = field(default_factory=AlertMonitor)
    started: float = 0.0
    finished: float = 0.0


@dataclass(frozen=True)
class _Wiring:
    """The step loop's connections to the pipeline."""

    producer: RolloutProducer
    scored: ScoredBatches
    run_id: str


async def run_train_demo(
    options: TrainDemoOptions, *, shutdown: Awaitable[None], started: float | None = None
) -> int:
    """Run the demo; 0 when every step ran and the mean reward improved.

    ``started`` (``time.monotonic()``) is when the command began, before torch and
    verl were imported, so the summary's ``wall_s`` counts those imports too.
    """
    command_started = time.monotonic() if started is None else started
    device = resolve_device(options.device)
    if device.type == "cpu":
        # The sandbox workers and the broker need the other cores.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - options.workers))
    tasks = task_family(options.behaviours())
    trainer = _trainer(options, device, batch_size=len(tasks) * options.group_size)
    run = _Run(monitor=AlertMonitor(options.alerts))
    error: str | None = None
    async with contextlib.AsyncExitStack() as stack:
        wiring = await _pipeline(stack, options)
        work = asyncio.ensure_future(_train(options, trainer, tasks, wiring, run))
        stop = asyncio.ensure_future(shutdown)
        await asyncio.wait([work, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not work.done():
            work.cancel()
            error = "interrupted"
            with contextlib.suppress(asyncio.CancelledError):
                await work
        elif (failure := work.exception()) is not None:
            error = f"{type(failure).__name__}: {failure}"
    plot = None
    if run.records:
        plot = write_plot(
            options.plot.resolve(),
            run.records,
            title=f"rewardbus train-demo: {len(run.records)} steps, GRPO, rewards from the "
            f"sandbox pipeline ({options.workers} workers, {device.type})",
        )
    facts = RunFacts(
        steps_requested=options.steps,
        window=options.window,
        wall_s=time.monotonic() - command_started,
        train_s=run.finished - run.started if run.records else 0.0,
        device=str(device),
        workers=options.workers,
        strict=options.strict,
        group_size=options.group_size,
        tasks=[task.name for task in tasks],
        plot=plot,
        alerts=dict(run.monitor.counts),
        verdicts=run.verdicts,
        policy_parameters=sum(p.numel() for p in trainer.policy.parameters()),
        error=error,
    )
    result = summary(run.records, facts)
    print_summary(result, as_json=options.json)
    improved = result["reward_mean_last"] > result["reward_mean_first"]
    return 0 if error is None and len(run.records) == options.steps and improved else 1


def _trainer(options: TrainDemoOptions, device: torch.device, *, batch_size: int) -> Trainer:
    learner = options.learner
    return Trainer(
        TrainerSetup(
            device=device,
            seed=options.seed,
            learner=learner,
            loss_fn=verl_policy_loss(learner, rollout_n=options.group_size, batch_size=batch_size),
            aggregate_fn=verl_aggregate(),
            total_steps=options.steps,
            d_model=options.d_model,
            n_layers=options.n_layers,
        )
    )


async def _pipeline(stack: contextlib.AsyncExitStack, options: TrainDemoOptions) -> _Wiring:
    """Broker (unless given one), topics, sandbox workers, aggregator, producer, reader."""
    if options.bootstrap:
        bootstrap = options.bootstrap
    else:
        say("starting the embedded Kafka broker")
        bootstrap = await stack.enter_async_context(embedded_broker())
    run_id = uuid.uuid4().hex[:8]
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap,
        topics=Topics(prefix=f"train-demo-{run_id}."),
        client_id="train-demo",
    )
    group = f"train-demo-{run_id}-workers"
    await local_pipeline(
        stack,
        kafka,
        workers=options.workers,
        strict=options.strict,
        group_id=group,
        worker_id_prefix="train-demo-worker",
        aggregator_group=f"train-demo-{run_id}-aggregator",
        partitions=max(2, options.workers),
    )
    sandbox = "strict sandbox" if options.strict else "sandbox, degraded layers allowed"
    say(f"{options.workers} sandbox worker processes ({sandbox}) joined {group!r}")
    producer = await stack.enter_async_context(RolloutProducer(kafka))
    scored = await stack.enter_async_context(ScoredBatches(kafka))
    return _Wiring(producer=producer, scored=scored, run_id=run_id)


async def _train(
    options: TrainDemoOptions,
    trainer: Trainer,
    tasks: Sequence[Task],
    wiring: _Wiring,
    run: _Run,
) -> None:
    counters = AlertCounters()
    step_tasks = [task for task in tasks for _ in range(options.group_size)]
    say(
        f"training: {options.steps} steps x {len(step_tasks)} samples "
        f"({len(tasks)} tasks x {options.group_size}), device {trainer.allowed.device}"
    )
    run.started = time.monotonic()
    for step in range(options.steps):
        record = await _step(options, trainer, step_tasks, wiring, run=run, step=step)
        run.records.append(record)
        run.finished = time.monotonic()
        alerts = run.monitor.observe(record)
        counters.record(record, alerts)
        say(progress_line(record, options.steps))


async def _step(
    options: TrainDemoOptions,
    trainer: Trainer,
    step_tasks: Sequence[Task],
    wiring: _Wiring,
    *,
    run: _Run,
    step: int,
) -> StepRecord:
    started = time.monotonic()
    rollout, texts = await asyncio.to_thread(trainer.rollout, step_tasks)
    batch_id = f"{wiring.run_id}-step-{step:04d}"
    samples = step_samples(
        batch_id, step_tasks, texts, policy_version=step, deadline_s=options.step_timeout_s
    )
    published = time.monotonic()
    await wiring.producer.publish_manifest(samples.manifest)
    await wiring.producer.publish_many(samples.completions)
    scored = await wiring.scored.get(batch_id, timeout=options.step_timeout_s + 10.0)
    latency_s = time.monotonic() - published
    data, _counters = scored_batch_to_dataproto(
        scored,
        rollout_dataproto(rollout, samples.sample_ids, samples.group_ids),
        learner_version=step,
    )
    metrics = await asyncio.to_thread(trainer.learn, data)
    empty_cache(trainer.allowed.device)
    run.verdicts.update(str(s.verdict) for s in scored.samples if s.verdict is not None)
    return _record(
        step,
        scored,
        rollout.response_mask,
        latency_s=latency_s,
        started=started,
        metrics=metrics,
    )


def _record(
    step: int,
    scored: ScoredBatch,
    response_mask: torch.Tensor,
    *,
    latency_s: float,
    started: float,
    metrics: UpdateMetrics,
) -> StepRecord:
    kept = [s for s in scored.samples if s.present and not s.masked]
    return StepRecord(
        step=step,
        reward_mean=sum(s.score for s in kept) / len(kept) if kept else 0.0,
        response_length=float(response_mask.sum(dim=-1).float().mean()),
        reward_latency_ms=latency_s * 1000,
        rewards_per_s=len(scored.samples) / max(latency_s, 1e-9),
        step_s=time.monotonic() - started,
        samples=len(scored.samples),
        masked=len(scored.samples) - len(kept),
        cache_hits=sum(1 for s in scored.samples if s.cache_hit),
        accepted=sum(1 for s in kept if str(s.verdict) == "accepted"),
        loss=metrics.loss,
        grad_norm=metrics.grad_norm,
        clip_fraction=metrics.clip_fraction,
        approx_kl=metrics.approx_kl,
    )
