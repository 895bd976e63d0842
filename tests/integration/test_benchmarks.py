"""The benchmarks still run: each one's --quick smoke run, end to end, as a user starts it.

Only what a smoke run can say is checked: the last line is the JSON report and
every program was judged right. Speed targets are the full runs' business
(benchmarks/README.md), never a test's: this machine is shared and noisy.

Those that need Kafka run on the session's broker (``--bootstrap-servers``; each run
makes its own uuid-prefixed topics), except the two that measure the broker process
itself (its CPU, its memory), which start their own as a user's run does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def quick_run(
    name: str, bootstrap: str | None = None, flags: tuple[str, ...] = ("--quick",)
) -> dict[str, Any]:
    where = ["--bootstrap-servers", bootstrap] if bootstrap else []
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *flags, *where],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.timeout(180)
def test_bench_sandbox_quick() -> None:
    report = quick_run("bench_sandbox.py")
    levels = report["levels"]
    assert set(levels) == {"1", "2"}
    for measures in levels.values():
        assert "rewardbus sandbox, warm" in measures
        assert all(m["failures"] == 0 for m in measures.values()), measures


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sets", [1, 6])
def test_bench_jail_cpu_quick(sets: int) -> None:
    flags = ("--runs", "30", "--blocks", "1", "--mount-sets", str(sets))
    report = quick_run("bench_jail_cpu.py", flags=flags)
    assert report["mount_sets"] == sets
    assert set(report["jail_ms"]) == {"machine", "jail", "worker", "rest"}
    assert report["floor_ms"] > 0 and report["jail_ms"]["machine"] > 0
    assert report["jail_ms"]["jail"] > 0 and report["jail_ms"]["worker"] > 0


@pytest.mark.timeout(180)
def test_bench_confine_quick() -> None:
    rows = quick_run("bench_confine.py", flags=("--blocks", "3", "--forks", "50"))["rows"]
    assert set(rows) == {
        "fork",
        "seccomp_linear",
        "seccomp_tree",
        "bounding_set_full",
        "signals_all",
        "fork_prepared_parent",
        "bounding_set_empty",
        "signals_noted",
    }
    assert rows["seccomp_tree"]["instructions"] > rows["seccomp_linear"]["instructions"] > 50
    assert all(row["ms"] > 0 for row in rows.values())


@pytest.mark.timeout(180)
def test_bench_session_quick() -> None:
    report = quick_run("bench_session.py", flags=("--tests", "30", "--bare", "20"))
    session, bare = report["session_ms"], report["bare_ms"]
    # Each test forks and execs the program in the jail: its cgroup was charged for it.
    assert session["sandboxed"] > 0 and session["worker"] > 0, session
    assert session["cpu"] == pytest.approx(session["worker"] + session["sandboxed"], abs=1e-3)
    assert bare["cpu"] > 0 and set(report["ratio"]) == {"cpu", "machine", "wall"}


@pytest.mark.timeout(180)
def test_bench_tools_quick(kafka_bootstrap: str) -> None:
    report = quick_run("bench_tools.py", kafka_bootstrap)
    levels = report["kafka"]["levels"]
    assert set(levels) == {"1", "8", "32"}
    assert all(level["calls"] > 0 and level["rebuilt"] == 0 for level in levels.values())
    held = report["kafka"]["held"]
    # Every session held kept its own state, and no session was rebuilt to get it.
    assert held["read_back_right"] == held["sessions"] and held["rebuilt"] == 0, held
    assert report["kafka"]["rebuild"]["runs"] == 2
    assert set(report["targets"]) >= {"p50 round trip at 32 sessions", "PSS per session"}


@pytest.mark.timeout(180)
def test_bench_pipeline_quick(kafka_bootstrap: str) -> None:
    report = quick_run("bench_pipeline.py", kafka_bootstrap)
    for runs in report["throughput"]["runs"].values():
        for run in runs:
            if "judged_correctly" in run:
                assert run["judged_correctly"] == run["completions"], run
    assert set(report["trivial"]["verdicts"]) == {"accepted"}
    cache = report["cache"]
    for run in cache["runs"]["half_duplicates"]:
        assert run["cache_hits"] == run["distinct_programs"], run
    assert set(report["targets"]) == {
        "overhead_2_workers",
        "overhead_1_worker",
        "scaling_2_over_1",
        "p99_trivial_half_saturation",
        "cache_half_duplicates",
        "makespan",
    }
    for run in report["makespan"]["runs"].values():
        assert sum(run["per_worker"].values()) == run["samples"], run


@pytest.mark.timeout(180)
def test_bench_io_quick(kafka_bootstrap: str) -> None:
    report = quick_run("bench_io.py", kafka_bootstrap)
    limits = report["size_limits"]
    assert limits["inline_producer_and_topic_raised"] == "ok"
    assert limits["inline_default_limits"].startswith("FAILS: MessageSizeTooLargeError")
    for variant in ("inline", "problems"):
        for run in report["runs"][variant]:
            # keys are "<language>:<verdict>"; every solution is correct
            assert all(key.endswith(":accepted") for key in run["verdicts"]), run["verdicts"]


@pytest.mark.timeout(180)
def test_bench_verl_quick(kafka_bootstrap: str) -> None:
    report = quick_run("bench_verl.py", kafka_bootstrap)
    samples = report["samples"]
    assert samples >= 40
    for scorer in ("verl", "rewardbus"):
        measured = report[scorer]
        assert measured["samples"] == samples
        # verl's reward loop starts run_single for every sample at once.
        assert measured["max_run_single_in_flight"] == samples
        assert measured["run_single_latency_ms"]["n"] == samples
        assert measured["rewards_per_s"] > 0
    rewardbus = report["rewardbus"]
    assert rewardbus["cache_hits"] == 0  # every repeat is a distinct program
    assert rewardbus["infra_failures"] == 0
    assert set(report["ratios"]) == {"rewards_per_s", "p50_latency", "p99_latency"}


@pytest.mark.timeout(180)
def test_bench_overload_quick() -> None:
    report = quick_run("bench_overload.py")  # its own broker: its memory is reported
    for run in (report["peak"]["before"], report["overload"], report["peak"]["after"]):
        assert run["judged_correctly"] == run["completions"], run["verdicts"]
        assert "time_limit" not in run["verdicts"] and "sandbox_error" not in run["verdicts"]
        assert run["queue_ms"]["n"] == run["completions"]
    assert report["scored"]["complete"] == report["scored"]["batches"] > 0
    assert report["scored"]["missing_samples"] == 0
    # Every process is watched: broker, aggregator, each worker and its zygotes.
    assert {"broker.rss_mb", "aggregator.rss_mb", "worker-0.zygotes.rss_mb"} <= set(
        report["memory"]
    )
    assert set(report["targets"]) == {
        "sustained_over_peak",
        "cpu_sustained_over_peak",
        "backlog_over_publish_capacity",
        "time_limits",
        "sandbox_errors",
        "misjudged",
        "incomplete_batches",
        "rss_growth",
    }


@pytest.mark.timeout(180)
def test_bench_test_code_quick() -> None:
    # The benchmark itself exits non-zero when any completion is not accepted.
    report = quick_run("bench_test_code.py")
    for workload in ("humaneval", "many-asserts"):
        measured = report[workload]
        assert measured["worker-compiled"]["n"] == measured["sandbox-compiled"]["n"] > 0
        assert measured["ratio_p50"] > 0


@pytest.mark.timeout(180)
def test_bench_layers_quick() -> None:
    # Its own broker, as the CPU guard's: the broker's CPU is one of its layers.
    report = quick_run("bench_layers.py")
    assert set(report["cpu_ms"]) == {
        "floor",
        "jail",
        "harness and executor",
        "worker service",
        "broker and aggregator",
    }
    for setup, (run,) in report["runs"].items():
        assert run["wrong"] == 0 and run["completions"] == 20, (setup, run)
    assert all(cpu > 0 for cpu in report["setup_cpu_ms"].values()), report["setup_cpu_ms"]
    assert set(report["targets"]) == {"executor_rate", "pipeline_rate", "pipeline_cpu"}
    # Kafka alone: the relays answered every completion, at the pipeline's pace.
    (relayed,) = report["runs"]["kafka relay"]
    alone = report["kafka_alone"]
    assert relayed["period_ms"] == alone["period_ms"] > 0, alone
    assert alone["floor_jail_kafka_cpu_ms"] > alone["total_cpu_ms"] > 0, alone


@pytest.mark.timeout(180)
def test_cpu_guard_quick() -> None:
    # A smoke run judges nothing: it checks that the guard still measures every layer
    # (it exits 2 when one reads 0) and reads the committed baseline.
    report = quick_run("cpu_guard.py")  # its own broker: the guard measures its CPU
    assert report["status"] == 0
    assert set(report["verdicts"]) == {
        "worker_processes",
        "sandboxed",
        "broker",
        "bench_process",
        "total",
        "standby",
    }
    (only,) = report["passes"]
    assert only["cpu_ms_per_completion"]["sandboxed"] > 0
