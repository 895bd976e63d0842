"""The canary alert rules beyond what tests/observability/test_rules.py checks for every rule
file (promtool check and test, each alert tested both ways): their unit tests catch a
broken mismatch rule, and every metric they read is one the canary loop really exports."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rewardbus.canary import CanaryKind, CanaryMetrics, CanaryOutcome, compare
from rewardbus.canary.golden import Canary
from rewardbus.observability.gotools import PROMTOOL
from schemas import IoSuite, RewardEvent, Verdict, cache_root

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus" / "canary.rules.yml"
TESTS = ROOT / "infra" / "prometheus" / "tests" / "canary.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    binary = cache_root(os.environ) / "bin" / PROMTOOL.binary_name
    if not binary.is_file():
        pytest.fail(
            f"{binary} is missing: `make observability-tools` builds it "
            "(`make test` runs that first)"
        )
    return str(binary)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


NEVER_FIRES = "sum(rewardbus_canary_mismatches_total) > 1e9"
# Without the new-series branch a worker's first mismatch (a counter born at 1) never fires.
INCREASE_ONLY = (
    "sum by (canary, language, worker_id, expected, verdict) "
    "(increase(rewardbus_canary_mismatches_total[15m])) > 0"
)
ALWAYS_FIRES = (
    "sum by (canary, language, worker_id, expected, verdict) "
    "(rewardbus_canary_mismatches_total) >= 0"
)


@pytest.mark.parametrize("expr", [NEVER_FIRES, INCREASE_ONLY, ALWAYS_FIRES])
def test_the_unit_tests_fail_on_a_wrong_rule(promtool: str, tmp_path: Path, expr: str) -> None:
    """The tests have teeth: firing and not-firing cases each catch a broken mismatch rule."""
    rules = yaml.safe_load(RULES.read_text())
    group = rules["groups"][0]["rules"]
    (mismatch,) = [r for r in group if r["alert"] == "RewardbusCanaryMismatch"]
    mismatch["expr"] = expr
    (tmp_path / "canary.rules.yml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "canary.test.yml").write_text(TESTS.read_text())
    done = run(promtool, "test", "rules", str(tmp_path / "tests" / "canary.test.yml"))
    assert done.returncode != 0
    assert "RewardbusCanaryMismatch" in done.stdout + done.stderr


def exported_names() -> set[str]:
    """The series names the canary loop's counters get on a Prometheus endpoint."""
    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    recorder = CanaryMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    canary = Canary(
        name="c",
        language="python",
        kind=CanaryKind.CORRECT,
        expect=Verdict.ACCEPTED,
        code="",
        tests=IoSuite(inputs=[], outputs=[]),
    )
    bad = RewardEvent(sample_id="s", verdict=Verdict.WRONG_ANSWER, worker_id="w")
    recorder.record(CanaryOutcome(canary, "s", bad, compare(canary, bad)))
    recorder.record(CanaryOutcome(canary, "t", None, error="timeout"))
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_rules_read_only_metrics_the_canary_loop_exports() -> None:
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    read = {name for expr in exprs for name in re.findall(r"\brewardbus_\w+", expr)}
    assert read == {
        "rewardbus_canary_mismatches_total",
        "rewardbus_canary_unanswered_total",
        "rewardbus_canary_judged_total",
    }
    assert read <= exported_names()
