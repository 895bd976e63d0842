"""``rewardbus train-demo``: generate, score through the real pipeline, update; repeat.

Per step: the policy samples ``group_size`` responses for every task of the
family; they go out as ``Completion``s with a ``BatchManifest`` (group ids = the
GRPO ``uid``) through ``RolloutProducer``; sandbox worker processes judge them
(strict sandbox by default) and the aggregator emits the step's ``ScoredBatch``;
``scored_batch_to_dataproto`` turns it and the rollout into verl's ``DataProto``
(GRPO advantages, masked rows zeroed); verl's policy loss updates the policy.
Nothing scores a sample in this process.

With ``checkpoint_dir`` the run saves a checkpoint every ``checkpoint_every`` steps
(:mod:`rewardbus.train_demo.checkpoint`: weights, optimiser, step and the learner's
position in the scored-batch stream in one atomic write) and ``resume`` continues the
latest one: same topics, the stream read from the saved position, and batch ids of a
new incarnation, so a batch the killed process had published is skipped (its
rollout died with it), never applied to a rollout it was not scored for.
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from consumers import LearnerSource, ScoredBatches, StreamPosition
from producers import RolloutProducer
from rewardbus.runtime.local import embedded_broker, local_pipeline
from rewardbus.train_demo.checkpoint import (
    AppliedLog,
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from rewardbus.train_demo.completions import step_samples
from rewardbus.train_demo.devices import empty_cache, resolve_device
from rewardbus.train_demo.learner import UpdateMetrics
from rewardbus.train_demo.monitor import AlertCounters, AlertMonitor, StepRecord
from rewardbus.train_demo.options import TrainDemoOptions
from rewardbus.train_demo.report import (
    RunFacts,
    print_summary,
    say,
    step_progress,
    summary,
    write_plot,
)
from rewardbus.train_demo.rollout import rollout_dataproto
from rewardbus.train_demo.tasks import Task, task_family
from rewardbus.train_demo.trainer import Trainer, TrainerSetup
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
    # What earlier incarnations did (a resumed run).
    first_step: int = 0
    resumed_at: tuple[int, ...] = ()
    train_s_before: float = 0.0
    skipped: int = 0

    @property
    def train_s(self) -> float:
        """Training time over every incarnation."""
        here = self.finished - self.started if self.records[self.first_step :] else 0.0
        return self.train_s_before + here


@dataclass(frozen=True)
class _Identity:
    """Which run this process continues, and as which incarnation."""

    run_id: str
    incarnation: int
    bootstrap: str | None  # None: the embedded broker
    position: StreamPosition | None
    first_step: int = 0

    def batch_id(self, step: int) -> str:
        """A step's batch id; a resumed process's own, so none of the dead one's is taken."""
        suffix = f"-r{self.incarnation}" if self.incarnation else ""
        return f"{self.run_id}-step-{step:04d}{suffix}"


@dataclass(frozen=True)
class _Wiring:
    """The step loop's connections to the pipeline."""

    producer: RolloutProducer
    learner: LearnerSource[Any, Any]
    identity: _Identity
    applied: AppliedLog | None


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
    identity = _identity(options, trainer, run, device)
    error: str | None = None
    async with contextlib.AsyncExitStack() as stack:
        wiring = await _pipeline(stack, options, identity, run)
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
        resumed = (
            f", resumed at step {', '.join(map(str, run.resumed_at))}" if run.resumed_at else ""
        )
        plot = write_plot(
            options.plot.resolve(),
            run.records,
            title=f"rewardbus train-demo: {len(run.records)} steps, GRPO, rewards from the "
            f"sandbox pipeline ({options.workers} workers, {device.type}){resumed}",
            resumed_at=run.resumed_at,
        )
    facts = RunFacts(
        steps_requested=options.steps,
        window=options.window,
        wall_s=time.monotonic() - command_started,
        train_s=run.train_s,
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
        resumed_at=run.resumed_at,
        skipped_batches=run.skipped,
    )
    result = summary(run.records, facts)
    print_summary(result, as_json=options.json)
    return 0 if error is None and len(run.records) == options.steps and result.improved else 1


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


def _settings(options: TrainDemoOptions, device: torch.device) -> dict[str, Any]:
    """What a resumed run must share with its checkpoint."""
    return {
        "steps": options.steps,
        "group_size": options.group_size,
        "seed": options.seed,
        "tasks": [b.name for b in options.behaviours()],
        "d_model": options.d_model,
        "n_layers": options.n_layers,
        "learner": asdict(options.learner),
        "device_type": device.type,
    }


def _bootstrap(options: TrainDemoOptions) -> str | None:
    """The cluster the options name (None: the embedded broker)."""
    return None if options.kafka is None else options.kafka.bootstrap_servers


def _identity(
    options: TrainDemoOptions, trainer: Trainer, run: _Run, device: torch.device
) -> _Identity:
    """A new run's identity, or the checkpoint's restored into ``trainer`` and ``run``."""
    directory = options.checkpoint_dir
    found = load_checkpoint(directory) if directory is not None else None
    if found is None:
        if options.resume:
            say(f"no checkpoint in {directory}: starting a new run")
        return _Identity(uuid.uuid4().hex[:8], 0, _bootstrap(options), None, first_step=0)
    if not options.resume:
        raise CheckpointError(
            f"{directory} holds a checkpoint of run {found.run_id} at step {found.step}: "
            "pass --resume to continue it, or choose another --checkpoint-dir"
        )
    found.check_settings(_settings(options, device))
    if found.bootstrap is None and options.kafka is not None:
        raise CheckpointError(
            "the checkpoint's stream is on the embedded broker kept in the checkpoint "
            "directory: resume without --bootstrap"
        )
    trainer.load_state_dict(found.trainer)
    run.records = list(found.records)
    for record in run.records:
        run.monitor.observe(record)
    run.verdicts.update(found.verdicts)
    run.first_step = found.step
    run.resumed_at = (*found.resumed_at, found.step)
    run.train_s_before = found.train_s
    say(f"resuming run {found.run_id} at step {found.step} from {directory}")
    return _Identity(
        found.run_id,
        found.incarnation + 1,
        _bootstrap(options) or found.bootstrap,
        StreamPosition.from_dict(found.position),
        first_step=found.step,
    )


async def _pipeline(
    stack: contextlib.AsyncExitStack, options: TrainDemoOptions, identity: _Identity, run: _Run
) -> _Wiring:
    """Broker (unless given one), topics, sandbox workers, aggregator, producer, reader."""
    if identity.bootstrap:
        # The cluster named now (with its security settings), else the checkpoint's.
        cluster = options.kafka or KafkaSettings(bootstrap_servers=identity.bootstrap)
    else:
        # With a checkpoint directory the broker's data is kept in it: the stream the
        # checkpoint's position points into must outlive this process.
        kept = options.checkpoint_dir / "broker" if options.checkpoint_dir else None
        say("starting the embedded Kafka broker" + (f" (data in {kept})" if kept else ""))
        bootstrap = await stack.enter_async_context(embedded_broker(data_dir=kept))
        cluster = KafkaSettings(bootstrap_servers=bootstrap)
    run_id = identity.run_id
    kafka = replace(cluster, topics=Topics(prefix=f"train-demo-{run_id}."), client_id="train-demo")
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
    scored = await stack.enter_async_context(ScoredBatches(kafka, start_at=identity.position))
    applied = None
    if options.checkpoint_dir is not None:
        applied = AppliedLog(options.checkpoint_dir, identity.incarnation)
        if identity.incarnation:
            applied.write("resumed", step=identity.first_step, run_id=run_id)

    def skipped(batch: ScoredBatch) -> None:
        # A batch the killed process published after its checkpoint: its rollout is gone.
        run.skipped += 1
        if applied is not None:
            applied.write("skipped", batch_id=batch.batch_id)

    learner = LearnerSource.for_verl(scored, max_in_flight=1, on_skip=skipped)
    return _Wiring(producer=producer, learner=learner, identity=identity, applied=applied)


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
    run.started = run.finished = time.monotonic()
    with step_progress(options.steps, run.first_step) as report:
        for step in range(run.first_step, options.steps):
            record = await _step(options, trainer, step_tasks, wiring, run=run, step=step)
            run.records.append(record)
            run.finished = time.monotonic()
            alerts = run.monitor.observe(record)
            counters.record(record, alerts)
            report(record)
            done = step + 1
            due = done % options.checkpoint_every == 0 or done == options.steps
            if options.checkpoint_dir is not None and due:
                await asyncio.to_thread(
                    _checkpoint, options.checkpoint_dir, options, trainer, wiring, run
                )


def _checkpoint(
    directory: Path, options: TrainDemoOptions, trainer: Trainer, wiring: _Wiring, run: _Run
) -> None:
    """Save the state after the last step run, and where in the stream its batch was."""
    next_step = run.records[-1].step + 1
    position = wiring.learner.position()
    identity = wiring.identity
    path = save_checkpoint(
        directory,
        Checkpoint(
            step=next_step,
            run_id=identity.run_id,
            incarnation=identity.incarnation,
            bootstrap=identity.bootstrap,
            settings=_settings(options, trainer.allowed.device),
            trainer=trainer.state_dict(),
            position=position.to_dict(),
            records=tuple(run.records),
            verdicts=dict(run.verdicts),
            resumed_at=run.resumed_at,
            train_s=run.train_s,
        ),
    )
    if wiring.applied is not None:
        wiring.applied.write("checkpoint", step=next_step, position=position.to_dict())
    say(f"checkpoint: step {next_step} in {path}")


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
    batch_id = wiring.identity.batch_id(step)
    samples = step_samples(
        batch_id, step_tasks, texts, policy_version=step, deadline_s=options.step_timeout_s
    )
    learner = wiring.learner
    learner.learner_version = step
    learner.hold(
        batch_id,
        rollout_dataproto(rollout, {"uid": samples.group_ids, "sample_id": samples.sample_ids}),
    )
    published = time.monotonic()
    await wiring.producer.publish_manifest(samples.manifest)
    await wiring.producer.publish_many(samples.completions)
    try:
        item = await learner.next(timeout=options.step_timeout_s + 10.0)
    except TimeoutError:
        learner.forget(batch_id)
        raise
    scored = item.scored
    latency_s = time.monotonic() - published
    metrics = await asyncio.to_thread(trainer.learn, item.data)
    empty_cache(trainer.allowed.device)
    if wiring.applied is not None:
        wiring.applied.write("applied", step=step, batch_id=batch_id)
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
