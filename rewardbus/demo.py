"""``rewardbus demo``: HumanEval through the whole pipeline on a real broker.

Starts (unless given a cluster) the embedded Kafka broker, a pool of sandbox
worker processes and the aggregator; publishes the 164 canonical HumanEval
solutions and 164 deliberately broken variants in batches; waits for every
scored batch; prints a summary; stops everything it started.

With ``workers=0`` it starts nothing: it drives a deployment (infra/compose,
infra/k8s), whose own workers and aggregator judge and score its batches on the
deployment's topics (the prefix of ``kafka``'s topics). It first waits, bounded, for
that deployment to answer and to have its topics: one just brought up takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from consumers import ScoredBatches
from producers import HumanEvalSample, RolloutProducer, build_batches, humaneval_samples
from rewardbus.observability.jaeger_query import DEFAULT_QUERY_URL
from rewardbus.observability.percentiles import Percentiles
from rewardbus.runtime.local import RewardWatcher, embedded_broker, local_pipeline
from rewardbus.topics import await_cluster_topics
from schemas import KafkaSettings, RewardEvent, ScoredBatch, Topics

__all__ = ["DemoOptions", "DemoSummary", "run_demo"]

WORKER_GROUP = "rewardbus-demo-workers"


@dataclass(frozen=True)
class DemoOptions:
    """What the demo runs and how it reports."""

    workers: int = 2
    batch_size: int = 32
    limit: int | None = None
    json: bool = False
    strict: bool = True
    timeout_s: float = 600.0
    # A cluster to use instead of the embedded broker (None: start one). With
    # workers == 0 its topic prefix is the deployment's; otherwise the demo's own.
    kafka: KafkaSettings | None = None
    deadline_s: float = 300.0
    # Jaeger's query URL when spans are exported there (--trace): the demo ends by
    # saying how to look at one sample's trace.
    jaeger_url: str | None = None
    # The environment of the worker processes it starts (None: this process's).
    worker_env: Mapping[str, str] | None = None
    # How long a deployment's brokers and topics are waited for (workers == 0).
    ready_timeout_s: float = 120.0

    @property
    def deployed(self) -> bool:
        """Drive a deployment's workers and aggregator instead of starting its own."""
        return self.workers == 0


@dataclass
class _Progress:
    total: int
    sent_at: dict[str, float] = field(default_factory=dict)
    reward_at: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, RewardEvent] = field(default_factory=dict)
    scored_at: dict[str, float] = field(default_factory=dict)
    batches: dict[str, ScoredBatch] = field(default_factory=dict)


class _ProgressView:
    """The rewards as they arrive, on stderr: a ``rich`` progress bar on a terminal; a
    plain line at each twentieth of the total otherwise (a log, a pipe)."""

    def __init__(self, progress: _Progress, console: Console) -> None:
        self._progress = progress
        self._console = console
        self._last_logged = -1
        self._bar = Progress(
            TextColumn("rewards"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[batches]} batches"),
            TextColumn("{task.fields[rate]:.1f}/s"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        )
        self._task = self._bar.add_task("rewards", total=progress.total, batches=0, rate=0.0)
        self._started = time.monotonic()

    def __enter__(self) -> _ProgressView:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.update(final=True)
        self._bar.stop()

    def update(self, *, final: bool = False) -> None:
        done, batches = len(self._progress.rewards), len(self._progress.batches)
        rate = done / max(1e-9, time.monotonic() - self._started)
        if self._console.is_terminal:
            self._bar.update(self._task, completed=done, batches=batches, rate=rate)
            return
        step = max(1, self._progress.total // 20)
        if final or done // step != self._last_logged // step:
            self._last_logged = done
            _say(f"{done}/{self._progress.total} rewards, {batches} batches, {rate:.1f}/s")


async def run_demo(options: DemoOptions, *, shutdown: Awaitable[None]) -> int:
    """Run the demo; 0 when every canonical solution passed and no broken one did."""
    async with contextlib.AsyncExitStack() as stack:
        if options.kafka is not None:
            cluster = options.kafka
        else:
            _say("starting the embedded Kafka broker")
            cluster = KafkaSettings(await stack.enter_async_context(embedded_broker()))
        bootstrap = cluster.bootstrap_servers
        run_id = uuid.uuid4().hex[:8]
        prefix = cluster.topics.prefix if options.deployed else f"demo-{run_id}."
        kafka = replace(cluster, topics=Topics(prefix=prefix), client_id="demo")
        if options.deployed:
            # Its topics, workers and aggregator are the deployment's: start none.
            _say(f"driving the deployment on {bootstrap} (topics prefixed {prefix!r})")
            topics = kafka.topics
            # aiokafka logs an error for every refused connection: one a second here,
            # while the wait itself says what it waits for, once.
            with _silenced(logging.getLogger("aiokafka")):
                await await_cluster_topics(
                    kafka,
                    [topics.completions, topics.manifests, topics.rewards, topics.scored],
                    timeout_s=options.ready_timeout_s,
                    on_wait=lambda why: _say(
                        f"waiting up to {options.ready_timeout_s:g} s for the deployment: {why}"
                    ),
                )
        else:
            await _start_pipeline(stack, kafka, options)
        samples = humaneval_samples(limit=options.limit)
        progress = _Progress(total=len(samples))
        with _ProgressView(progress, Console(stderr=True)) as view:
            work = asyncio.ensure_future(
                _publish_and_collect(kafka, options, samples, progress, run_id, view=view)
            )
            stop = asyncio.ensure_future(shutdown)
            await asyncio.wait(
                [work, stop], timeout=options.timeout_s, return_when="FIRST_COMPLETED"
            )
            stop.cancel()
            finished = work.done()
            if finished:
                work.result()
            else:
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
        if not finished:
            _say("interrupted" if stop.done() else f"timed out after {options.timeout_s:.0f}s")
        summary = _summary(samples, progress, options)
    _print_summary(summary, as_json=options.json)
    if options.jaeger_url is not None:
        # With --json the JSON line stays the last line of stdout.
        _print_trace_hint(
            progress, options.jaeger_url, out=sys.stderr if options.json else sys.stdout
        )
    return 0 if summary.ok else 1


async def _start_pipeline(
    stack: contextlib.AsyncExitStack, kafka: KafkaSettings, options: DemoOptions
) -> None:
    """The demo's own topics, worker processes and aggregator, stopped with ``stack``."""
    _say(f"topics prefixed {kafka.topics.prefix!r} on {kafka.bootstrap_servers}")
    await local_pipeline(
        stack,
        kafka,
        workers=options.workers,
        strict=options.strict,
        group_id=WORKER_GROUP,
        worker_id_prefix="demo-worker",
        aggregator_group="rewardbus-demo-aggregator",
        partitions=max(4, 2 * options.workers),
        env=options.worker_env,
    )
    _say(f"{options.workers} sandbox worker processes joined group {WORKER_GROUP!r}")


def _print_trace_hint(progress: _Progress, jaeger_url: str, *, out: TextIO) -> None:
    """Point at the slowest sample's trace (produce to reward) and its batch's."""
    slowest = max(
        (k for k in progress.reward_at if k in progress.sent_at),
        key=lambda k: progress.reward_at[k] - progress.sent_at[k],
        default=None,
    )
    if slowest is None:
        return
    event = progress.rewards[slowest]
    url = "" if jaeger_url == DEFAULT_QUERY_URL else f" --jaeger-url {jaeger_url}"
    print(
        f"\ntraces (Jaeger query API at {jaeger_url}):\n"
        f"  rewardbus trace {slowest}{url}          # the slowest sample, as a waterfall\n"
        f"  rewardbus trace --batch {event.batch_id}{url}   # its batch and every sample in it",
        file=out,
        flush=True,
    )


@contextlib.contextmanager
def _silenced(logger: logging.Logger) -> Iterator[None]:
    """Drop ``logger``'s records (errors included) for the duration."""

    def drop(record: logging.LogRecord) -> bool:
        del record
        return False

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def _say(message: str) -> None:
    print(f"rewardbus demo: {message}", file=sys.stderr, flush=True)


async def _publish_and_collect(
    kafka: KafkaSettings,
    options: DemoOptions,
    samples: list[HumanEvalSample],
    progress: _Progress,
    run_id: str,
    *,
    view: _ProgressView,
) -> None:
    batches = list(
        build_batches(
            samples, batch_size=options.batch_size, run_id=run_id, deadline_s=options.deadline_s
        )
    )
    # Map the stamped sample ids back to their variants for the summary.
    samples[:] = [s for _, chunk in batches for s in chunk]
    batch_ids = {manifest.batch_id for manifest, _ in batches}
    # On a deployment's topics other runs' rewards and batches are there too: both
    # readers start at the end, before anything is published, and count only this run's.
    async with (
        ScoredBatches(kafka, from_beginning=False) as scored,
        RewardWatcher(kafka, sample_prefix=f"{run_id}-", from_end=True) as watcher,
    ):
        progress.rewards, progress.reward_at = watcher.rewards, watcher.arrived_at
        redraw = asyncio.create_task(_redraw(watcher, view))
        try:
            async with RolloutProducer(kafka) as producer:
                for manifest, chunk in batches:
                    await producer.publish_manifest(manifest)
                    now = time.monotonic()
                    for sample in chunk:
                        progress.sent_at[sample.completion.sample_id] = now
                    await producer.publish_many(s.completion for s in chunk)
            async for batch in scored:
                if batch.batch_id not in batch_ids:
                    continue
                arrived = time.monotonic()
                progress.batches[batch.batch_id] = batch
                for scored_sample in batch.samples:
                    progress.scored_at.setdefault(scored_sample.sample_id, arrived)
                if batch_ids <= progress.batches.keys():
                    break
            # A scored batch can overtake the last reward records on the way to us.
            await watcher.wait_for(progress.total, timeout_s=options.timeout_s)
        finally:
            redraw.cancel()


async def _redraw(watcher: RewardWatcher, view: _ProgressView) -> None:
    while True:
        await watcher.changed()
        view.update()


@dataclass(frozen=True)
class DemoSummary:
    """What the demo found; printed as a table, and as one JSON object with ``--json``."""

    completions: int
    rewards: int
    workers: int
    batches: int
    batches_complete: int
    elapsed_s: float
    completions_per_s: float
    produce_to_reward_ms: Percentiles
    produce_to_scored_batch_ms: Percentiles
    verdicts: dict[str, int]
    canonical_accepted: int
    canonical_total: int
    broken_accepted: int
    broken_total: int
    cache_hits: int
    sandbox_degraded_layers: list[str]

    @property
    def ok(self) -> bool:
        """Every completion rewarded, every canonical solution accepted, no broken one."""
        return (
            self.canonical_accepted == self.canonical_total
            and self.broken_accepted == 0
            and self.rewards == self.completions
        )

    def to_json(self) -> dict[str, Any]:
        """The fields and ``ok``, as JSON-ready values."""
        return {**asdict(self), "ok": self.ok}


def _summary(
    samples: list[HumanEvalSample], progress: _Progress, options: DemoOptions
) -> DemoSummary:
    canonical = [s for s in samples if s.canonical]
    broken = [s for s in samples if not s.canonical]

    def accepted(group: list[HumanEvalSample]) -> int:
        return sum(
            1
            for s in group
            if (e := progress.rewards.get(s.completion.sample_id)) and e.verdict == "accepted"
        )

    reward_ms = [
        (progress.reward_at[k] - progress.sent_at[k]) * 1000
        for k in progress.reward_at
        if k in progress.sent_at
    ]
    scored_ms = [
        (progress.scored_at[k] - progress.sent_at[k]) * 1000
        for k in progress.scored_at
        if k in progress.sent_at
    ]
    first = min(progress.sent_at.values(), default=0.0)
    last = max(progress.reward_at.values(), default=first)
    elapsed = max(1e-9, last - first)
    verdicts = Counter(str(e.verdict) for e in progress.rewards.values())
    return DemoSummary(
        completions=len(samples),
        rewards=len(progress.rewards),
        workers=options.workers,
        batches=len(progress.batches),
        batches_complete=sum(1 for b in progress.batches.values() if b.complete),
        elapsed_s=round(elapsed, 2),
        completions_per_s=round(len(progress.rewards) / elapsed, 1),
        produce_to_reward_ms=Percentiles.of(reward_ms),
        produce_to_scored_batch_ms=Percentiles.of(scored_ms),
        verdicts=dict(sorted(verdicts.items())),
        canonical_accepted=accepted(canonical),
        canonical_total=len(canonical),
        broken_accepted=accepted(broken),
        broken_total=len(broken),
        cache_hits=sum(1 for e in progress.rewards.values() if e.cache_hit),
        sandbox_degraded_layers=sorted(
            {layer for e in progress.rewards.values() for layer in e.degraded}
        ),
    )


def _judged_by(workers: int) -> str:
    return f"{workers} worker processes" if workers else "the deployment's workers"


def _print_summary(summary: DemoSummary, *, as_json: bool) -> None:
    lat, scored = summary.produce_to_reward_ms, summary.produce_to_scored_batch_ms
    lines = [
        "",
        "rewardbus demo — HumanEval through Kafka, sandbox workers and the aggregator",
        f"  completions       {summary.rewards}/{summary.completions} rewarded "
        f"by {_judged_by(summary.workers)} in {summary.elapsed_s} s",
        f"  throughput        {summary.completions_per_s} completions/s",
        f"  produce→reward    p50 {lat.p50} ms   p99 {lat.p99} ms   max {lat.max} ms",
        f"  produce→batch     p50 {scored.p50} ms   p99 {scored.p99} ms",
        f"  batches           {summary.batches_complete}/{summary.batches} complete",
        f"  verdicts          {summary.verdicts}",
        f"  canonical         {summary.canonical_accepted}/{summary.canonical_total} accepted",
        f"  broken            {summary.broken_accepted}/{summary.broken_total} accepted",
    ]
    if summary.sandbox_degraded_layers:
        lines.append(f"  DEGRADED sandbox: missing {summary.sandbox_degraded_layers}")
    lines.append(f"  result            {'OK' if summary.ok else 'FAILED'}")
    print("\n".join(lines), flush=True)
    if as_json:
        print(json.dumps(summary.to_json(), sort_keys=True), flush=True)
