"""verl's own code reward against rewardbus, both through verl's reward loop, on the same samples.

The samples are the parity set (``examples/verl/parity/cases.jsonl``, each case
with its right score): every case once by default, or cycled to ``--samples``
(``--quick``: only the cases verl answers fast, once). Every sample's program
carries a comment line of its own, so rewardbus's result cache cannot turn
repeats into hits (the hits are counted and reported). Both scorers run the
way verl's trainer runs a reward step: one ``DataProto`` of real token ids into
verl's ``RewardLoopWorker.compute_score_batch``, which starts ``run_single`` for
every sample at once under ``asyncio.gather`` (all of them in flight):

(a) verl's default: the ``naive`` manager with ``default_compute_score``, the
    ``prime_code`` path for code data sources. verl runs that sync function in
    the event loop's default thread pool (``run_in_executor(None, ...)``:
    ``min(32, cpus + 4)`` threads), and ``prime_code`` forks its own processes
    (a ``multiprocessing.Manager`` and one runner per check) from this process.
(b) rewardbus: verl's importlib loader builds ``RewardbusRewardManager``, which
    publishes each sample to Kafka; ``--workers`` real sandbox worker processes
    (worker i pinned to CPU i, result cache on as deployed, ``--worker-concurrency``
    executions at once each, default 1 as deployed) judge them.

Each scorer first gets an untimed warm-up (8 trivial programs of their own).
Reported for each: agreement with the expected scores (and with each other),
rewards/s over the whole batch, p50/p99 latency of each ``run_single`` call (call
to result, so it includes waiting for a thread or a worker: everything is in
flight at once, as in verl), the most calls in flight, CPU per reward, and the
ratios rewardbus / verl. One JSON object on the last line.

    .venv/bin/python benchmarks/bench_verl.py [--quick] [--samples N] [--workers N]
        [--worker-concurrency N] [--bootstrap-servers HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: find _common
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # and benchmarks.verl_harness

from _common import (
    Cluster,
    CpuMeter,
    cluster,
    emit_json,
    fresh_kafka,
    percentiles,
    quiet_logs,
    rate,
    ratio,
    say,
    workers,
)
from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

from benchmarks.verl_harness import RunSingleTimer, parity_dataproto, verl_config
from benchmarks.verl_parity import (
    ParityCase,
    ParitySample,
    agreement,
    distinct_response,
    load_cases,
    load_verl_scores,
    repeat_cases,
    same_score,
)
from consumers.reward_client import SharedRewardClients, process_clients
from consumers.verl_reward import RewardbusRewardManager
from rewardbus.tokenizer import save_tokenizer

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "examples/verl/parity/cases.jsonl"
WARMUP = 8
# A smoke run keeps only the cases verl's prime_code answered within this many
# seconds when verl_scores.jsonl was recorded: a failing program costs prime_code
# a second round of one process per test, one that never ends its 5 s whole-suite
# timeout plus 10 s per test. The full run keeps every case.
FAST_S = 2.0


@dataclass(frozen=True)
class Plan:
    """Which cases, how many samples; ``--quick`` keeps the fast cases only, for a smoke run."""

    samples: int | None  # None: each case once
    fast_only: bool

    @staticmethod
    def make(args: argparse.Namespace) -> Plan:
        return Plan(args.samples, fast_only=args.quick)


@dataclass
class Run:
    """One scorer's pass over the samples."""

    scores: list[float]
    infos: list[dict[str, Any]]
    elapsed_s: float
    latencies_ms: list[float]
    max_in_flight: int
    cpu_ms_per_reward: dict[str, float]
    # Time spent on each sample itself, without waiting: verl's compute_score call in
    # its thread; rewardbus's execution at the worker (exec_ms).
    service_ms: list[float] = field(default_factory=list)


async def score_batch(worker: Any, data: Any, *, meter: CpuMeter) -> Run:
    """verl's ``compute_score_batch`` on ``data``, every ``run_single`` call timed."""
    timer = RunSingleTimer()
    timer.install(worker.reward_manager)
    before = meter.snapshot()
    started = time.monotonic()
    outputs = await worker.compute_score_batch(data)
    elapsed = time.monotonic() - started
    cpu = CpuMeter.per_item_ms(before, meter.snapshot(), len(outputs))
    return Run(
        scores=[float(o["reward_score"]) for o in outputs],
        infos=[dict(o.get("reward_extra_info") or {}) for o in outputs],
        elapsed_s=elapsed,
        latencies_ms=timer.latencies_ms,
        max_in_flight=timer.max_in_flight,
        cpu_ms_per_reward=cpu,
    )


def warmup_samples(tag: str) -> list[ParitySample]:
    """Trivial programs on a suite of their own: first-use costs, not the parity suites."""
    suite = '{"inputs": ["1\\n"], "outputs": ["2\\n"]}'
    case = ParityCase(
        case_id="warmup", data_source="apps", kind="warmup",
        response="```python\nprint(int(input()) + 1)\n```",
        ground_truth=suite, verl_ground_truth=suite, expected_score=1.0,
    )  # fmt: skip
    return [
        ParitySample(case, f"{tag}-{i}", distinct_response(case.response, f"{tag}-{i}"))
        for i in range(WARMUP)
    ]


async def run_verl(tokenizer_dir: Path, samples: Sequence[ParitySample]) -> Run:
    """(a): verl's naive manager and default_compute_score, in this process, as verl runs it."""
    worker = RewardLoopWorker(verl_config(tokenizer_dir, None))
    manager = worker.reward_manager
    say(f"verl: {type(manager).__name__}, {_default_threads()} executor threads")
    # prime_code prints parse errors to stdout: keep stdout for the report.
    with contextlib.redirect_stdout(sys.stderr):
        await worker.compute_score_batch(parity_dataproto(warmup_samples("vw"), for_verl=True))
        service_ms: list[float] = []
        score = manager.compute_score
        if score is None:
            raise RuntimeError("verl's naive manager has no compute_score")
        manager.compute_score = _timed(score, service_ms)
        data = parity_dataproto(samples, for_verl=True)
        run = await score_batch(worker, data, meter=CpuMeter())
    run.service_ms = service_ms
    say(f"verl: {len(samples)} rewards in {run.elapsed_s:.1f} s")
    return run


def _timed(score: Callable[..., Any], sink: list[float]) -> Callable[..., Any]:
    """A sync compute_score that records how long each call ran (in verl's thread)."""

    def timed(**kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return score(**kwargs)
        finally:
            sink.append((time.perf_counter() - started) * 1000)

    return timed


async def run_rewardbus(
    where: Cluster,
    tokenizer_dir: Path,
    samples: Sequence[ParitySample],
    count: int,
    concurrency: int,
) -> tuple[Run, dict[str, Any]]:
    """(b): RewardbusRewardManager through the same reward loop, ``count`` sandbox workers."""
    kafka = await fresh_kafka(where.bootstrap, "verl", partitions=max(4, 2 * count))
    pool = workers(kafka, count, cache_mb=None, tag="verl", concurrency=concurrency)
    async with pool as pids:
        worker = RewardLoopWorker(verl_config(tokenizer_dir, kafka))
        await worker.compute_score_batch(parity_dataproto(warmup_samples("rw"), for_verl=False))
        data = parity_dataproto(samples, for_verl=False)
        meter = CpuMeter(workers=tuple(pids), broker=where.broker_pid)
        run = await score_batch(worker, data, meter=meter)
        run.service_ms = [float(i.get("exec_ms", 0.0)) for i in run.infos]
        # The manager's client is the process's one for its settings (made by init_class).
        settings = RewardbusRewardManager.settings
        if settings is None:
            raise RuntimeError("verl did not initialise the rewardbus manager")
        shared = process_clients(settings, lambda: SharedRewardClients(kafka))
        client = await shared.get()
        stats = {
            "published": client.stats.published,
            "problems_published": client.stats.problems_published,
            "timeouts": client.stats.timeouts,
        }
        await shared.aclose()
    say(f"rewardbus: {len(samples)} rewards in {run.elapsed_s:.1f} s ({count} workers)")
    return run, stats


def summary(run: Run, samples: Sequence[ParitySample]) -> dict[str, Any]:
    """Speed and agreement of one scorer's pass."""
    right = sum(
        same_score(s, x.case.expected_score) for s, x in zip(run.scores, samples, strict=True)
    )
    return {
        "samples": len(run.scores),
        "elapsed_s": round(run.elapsed_s, 3),
        "rewards_per_s": round(rate(len(run.scores), run.elapsed_s), 2),
        "run_single_latency_ms": percentiles(run.latencies_ms),
        "service_ms": percentiles(run.service_ms),
        "max_run_single_in_flight": run.max_in_flight,
        "matches_expected": round(right / max(len(run.scores), 1), 4),
        "cpu_ms_per_reward": run.cpu_ms_per_reward,
    }


def rewardbus_details(run: Run) -> dict[str, Any]:
    """What rewardbus's extra info says: verdicts, cache hits, failures, stage times."""
    infos = run.infos
    return {
        "verdicts": dict(Counter(str(i.get("verdict")) for i in infos)),
        "cache_hits": sum(1 for i in infos if i.get("cache_hit")),
        "infra_failures": sum(1 for i in infos if i.get("infra_failure")),
        "timed_out": sum(1 for i in infos if i.get("timed_out")),
        "queue_ms": percentiles([float(i.get("queue_ms", 0.0)) for i in infos]),
    }


def per_case(
    samples: Sequence[ParitySample], verl: Run, ours: Run, recorded: dict[str, float]
) -> dict[str, Any]:
    """Which cases each scorer got wrong (with what), whether repeats of a case agree,
    and where verl's score here moved from the one ``verl_scores.jsonl`` records (a
    timeout under this run's load, or a repeat's comment that changed verl's verdict)."""
    verl_by_case: dict[str, set[float]] = {}
    ours_by_case: dict[str, set[float]] = {}
    verl_wrong: dict[str, set[float]] = {}
    ours_wrong: dict[str, set[str]] = {}
    verl_moved: dict[str, set[float]] = {}
    for sample, v, o, info in zip(samples, verl.scores, ours.scores, ours.infos, strict=True):
        case = sample.case
        verl_by_case.setdefault(case.case_id, set()).add(round(v, 6))
        ours_by_case.setdefault(case.case_id, set()).add(round(o, 6))
        if not same_score(v, case.expected_score):
            verl_wrong.setdefault(case.case_id, set()).add(round(v, 6))
        if case.case_id in recorded and not same_score(v, recorded[case.case_id]):
            verl_moved.setdefault(case.case_id, set()).add(round(v, 6))
        if not same_score(o, case.expected_score):
            ours_wrong.setdefault(case.case_id, set()).add(f"{o:.6g} {info.get('verdict')}")
    return {
        "cases": len(verl_by_case),
        "verl_wrong_cases": {k: sorted(v) for k, v in sorted(verl_wrong.items())},
        "rewardbus_wrong_cases": {k: sorted(v) for k, v in sorted(ours_wrong.items())},
        "verl_scores_differ_between_repeats": _unstable(verl_by_case),
        "rewardbus_scores_differ_between_repeats": _unstable(ours_by_case),
        "verl_differs_from_recorded": {
            k: {"recorded": recorded[k], "here": sorted(v)} for k, v in sorted(verl_moved.items())
        },
    }


def _unstable(by_case: dict[str, set[float]]) -> dict[str, list[float]]:
    return {k: sorted(v) for k, v in by_case.items() if len(v) > 1}


def choose_samples(plan: Plan, cases_path: Path) -> tuple[list[ParitySample], int]:
    """The cases (a smoke run: the quick ones only), cycled to the plan's sample count."""
    cases = load_cases(cases_path)
    if plan.fast_only:
        walls = load_verl_scores(cases_path.with_name("verl_scores.jsonl"))
        # A case not recorded yet has no known cost: a smoke run leaves it out.
        cases = [c for c in cases if c.case_id in walls and walls[c.case_id].wall_s <= FAST_S]
    total = plan.samples or len(cases)
    return repeat_cases(cases, total, uuid.uuid4().hex[:8]), len(cases)


def print_report(result: dict[str, Any]) -> None:
    print(f"verl default (prime_code) vs rewardbus, through verl's RewardLoopWorker, "
          f"{result['samples']} samples ({result['cases']} cases)")  # fmt: skip
    for name in ("verl", "rewardbus"):
        r = result[name]
        lat = r["run_single_latency_ms"]
        print(
            f"  {name:10} {r['rewards_per_s']:8.2f} rewards/s  run_single p50 {lat['p50']:.0f} ms"
            f" p99 {lat['p99']:.0f} ms  max in flight {r['max_run_single_in_flight']}"
            f"  right {100 * r['matches_expected']:.1f} %"
        )
    a = result["agreement"]
    print(
        f"  agreement: rewardbus = verl on {100 * a['rewardbus_matches_verl']:.1f} % of samples, "
        f"{100 * a['rewardbus_matches_verl_where_verl_right']:.1f} % of those verl gets right"
    )
    print(f"  verl wrong on {len(result['per_case']['verl_wrong_cases'])} cases; "
          f"rewardbus wrong on {len(result['per_case']['rewardbus_wrong_cases'])}; "
          f"rewardbus cache hits {result['rewardbus']['cache_hits']}; "
          f"verl off its recorded score on "
          f"{len(result['per_case']['verl_differs_from_recorded'])} cases")  # fmt: skip
    ratios = result["ratios"]
    print(
        f"  rewardbus / verl: rewards/s {ratios['rewards_per_s']}x, "
        f"p50 {ratios['p50_latency']}x, p99 {ratios['p99_latency']}x"
    )


async def run(args: argparse.Namespace) -> None:
    plan = Plan.make(args)
    load_before = os.getloadavg()
    started = time.monotonic()
    samples, cases = choose_samples(plan, args.cases)
    say(f"{len(samples)} samples from {cases} cases")
    with tempfile.TemporaryDirectory(prefix="rewardbus-bench-verl-") as tmp:
        tokenizer_dir = save_tokenizer(Path(tmp) / "tokenizer")
        # verl first: its prime_code forks from this process, which then holds no Kafka clients.
        verl = await run_verl(tokenizer_dir, samples)
        async with cluster(args.bootstrap_servers) as where:
            ours, client_stats = await run_rewardbus(
                where, tokenizer_dir, samples, args.workers, args.worker_concurrency
            )
    expected = [s.case.expected_score for s in samples]
    agree = agreement(expected, ours.scores, verl.scores)
    verl_summary, ours_summary = summary(verl, samples), summary(ours, samples)
    result: dict[str, Any] = {
        "samples": len(samples),
        "cases": cases,
        "verl": {**verl_summary, "executor_threads": _default_threads()},
        "rewardbus": {
            **ours_summary,
            **rewardbus_details(ours),
            "workers": args.workers,
            "worker_concurrency": args.worker_concurrency,
            "client": client_stats,
        },
        "agreement": agree.as_json(),
        "per_case": per_case(samples, verl, ours, _recorded_verl(args.cases)),
        "ratios": {
            "rewards_per_s": ratio(ours_summary["rewards_per_s"], verl_summary["rewards_per_s"]),
            "p50_latency": ratio(
                ours_summary["run_single_latency_ms"]["p50"],
                verl_summary["run_single_latency_ms"]["p50"],
            ),
            "p99_latency": ratio(
                ours_summary["run_single_latency_ms"]["p99"],
                verl_summary["run_single_latency_ms"]["p99"],
            ),
        },
    }
    print_report(result)
    result["meta"] = {
        "benchmark": "bench_verl",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "fast_cases_only": plan.fast_only,
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - started, 1),
    }
    emit_json(result)


def _recorded_verl(cases_path: Path) -> dict[str, float]:
    """verl's recorded scores beside the cases, if there are any."""
    path = cases_path.with_name("verl_scores.jsonl")
    if not path.exists():
        return {}
    return {case_id: record.score for case_id, record in load_verl_scores(path).items()}


def _default_threads() -> int:
    """The size of asyncio's default executor, where verl runs a sync compute_score."""
    return min(32, (os.cpu_count() or 1) + 4)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each fast case once: a smoke run")
    parser.add_argument(
        "--samples",
        type=int,
        help="samples per scorer, cycling through the cases (default: each once)",
    )
    parser.add_argument("--workers", type=int, default=2, help="rewardbus sandbox workers")
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=1,
        help="executions at once per worker (default 1)",
    )
    parser.add_argument("--cases", type=Path, default=CASES, help="a parity cases.jsonl")
    parser.add_argument("--bootstrap-servers", help="use this cluster, not an embedded broker")
    args = parser.parse_args(argv)
    quiet_logs()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
