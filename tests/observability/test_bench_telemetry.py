"""benchmarks/bench_telemetry.py still runs: its --quick smoke run on the session broker.

Only what a smoke run can say is checked (the report is the last line, both modes ran,
Prometheus really scraped the "on" runs); the 5 % target is the full run's business.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_telemetry.py"


@pytest.mark.timeout(600)
def test_bench_telemetry_quick(
    kafka_bootstrap: str, jaeger_binary: str, prometheus_binary: Path
) -> None:
    del jaeger_binary, prometheus_binary  # the benchmark finds the same cached builds
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--bootstrap-servers", kafka_bootstrap],
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report["runs"]) == {"off", "on"}
    for run in report["runs"]["on"]:
        assert run["prometheus_saw_completions"] >= run["completions"]
        parts = {"workers", "aggregator", "jaeger", "prometheus"}
        assert set(run["cpu_ms_per_completion"]) == parts
    assert report["mean_completions_per_s"]["off"] > 0
    assert report["mean_completions_per_s"]["on"] > 0
    assert "exporter_cpu_ms_per_completion" in report
