"""The alert rules in infra/prometheus/ pass promtool: every rule file is valid, every
test file passes, and every alert is tested both firing and not firing.

Every ``*.yml`` of infra/prometheus/ is a rule file and every ``tests/*.yml`` a promtool
test file (the canaries' rules and tests included), so a new file is checked without
editing this test.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from rewardbus.observability.gotools import PROMTOOL
from schemas import cache_root

RULES_DIR = Path(__file__).resolve().parents[2] / "infra" / "prometheus"
RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.yml"))


@pytest.fixture(scope="session")
def promtool() -> Path:
    binary = cache_root(os.environ) / "bin" / PROMTOOL.binary_name
    if not binary.is_file():
        pytest.fail(
            f"{binary} is missing: `make observability-tools` builds it "
            "(`make test` runs that first)"
        )
    return binary


def _run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_there_are_rules_and_tests() -> None:
    assert RULES_DIR / "rewardbus.rules.yml" in RULE_FILES
    assert RULES_DIR / "tests" / "rewardbus.test.yml" in TEST_FILES


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_promtool_checks_the_rule_file(promtool: Path, rules: Path) -> None:
    done = _run(promtool, "check", "rules", str(rules), cwd=RULES_DIR)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("tests", TEST_FILES, ids=lambda p: p.name)
def test_promtool_runs_the_rule_tests(promtool: Path, tests: Path) -> None:
    done = _run(promtool, "test", "rules", tests.name, cwd=tests.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def _alerts(path: Path) -> set[str]:
    document = yaml.safe_load(path.read_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    return {rule["alert"] for rule in rules if "alert" in rule}


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text()).get("tests", []):
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = set().union(*(_alerts(path) for path in RULE_FILES))
    assert alerts
    assert sorted(alerts - firing) == [], "alerts never tested firing"
    assert sorted(alerts - quiet) == [], "alerts never tested not firing"
