"""A real Prometheus scrapes the running worker and aggregator; PromQL over its HTTP
API returns the counts the session's workload produced. ``rewardbus prometheus`` runs
as a subprocess: ready, scraping its targets, the rules loaded, stopped by SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from rewardbus.observability.prometheus import (
    PrometheusConfig,
    PrometheusProcess,
    query,
    scrape_config,
)
from tests.observability.metered import ACCEPTED, DEAD, WRONG, Metered
from tests.support.poll import until_sync

pytestmark = pytest.mark.integration

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "rewardbus.rules.yml"


def _value(url: str, promql: str) -> float | None:
    found = query(url, promql)
    return found[0].value if len(found) == 1 else None


def test_promql_returns_the_counts_the_workload_produced(
    metered: Metered, prometheus: PrometheusProcess
) -> None:
    url = prometheus.config.url
    judged = ACCEPTED + WRONG + DEAD
    # Both targets scraped once (each on its own schedule).
    until_sync(
        lambda: _value(url, 'sum(up{job="rewardbus"})') == 2, "both targets up", timeout_s=60
    )
    until_sync(
        lambda: _value(url, "sum(rewardbus_worker_completions_total)") == judged,
        "a scrape",
        timeout_s=60,
    )
    batches = 'sum(rewardbus_aggregator_batches_total{complete="true"})'
    until_sync(lambda: _value(url, batches) is not None, "a scrape of the aggregator", timeout_s=60)
    by_verdict = {
        s.labels["verdict"]: s.value
        for s in query(url, "sum by (verdict) (rewardbus_worker_rewards_total)")
    }
    assert by_verdict == {"accepted": ACCEPTED, "wrong_answer": WRONG}
    assert _value(url, 'sum(rewardbus_worker_dead_letters_total{stage="decode"})') == DEAD
    assert _value(url, batches) == 1
    assert _value(url, "max(rewardbus_aggregator_reward_mean)") == pytest.approx(
        ACCEPTED / (ACCEPTED + WRONG)
    )
    assert _value(url, "sum(rewardbus_worker_live)") == 1

    def every_target_up() -> bool:
        up = {s.labels["instance"]: s.value for s in query(url, 'up{job="rewardbus"}')}
        return up == dict.fromkeys(metered.targets, 1.0)

    # One scrape can time out on a loaded machine; the next must succeed.
    until_sync(every_target_up, f"each of {metered.targets} up", timeout_s=60)
    buckets = "rewardbus_worker_reward_latency_milliseconds_bucket"
    p99 = _value(url, f"histogram_quantile(0.99, sum by (le) ({buckets}))")
    assert p99 is not None and 0 < p99 < 120_000


def test_the_scrape_config_is_local_and_short() -> None:
    config = PrometheusConfig(targets=("127.0.0.1:9464",), scrape_interval_s=0.5)
    document = scrape_config(config)
    assert document["global"]["scrape_interval"] == "500ms"
    (job,) = document["scrape_configs"]
    assert job["scrape_timeout"] == "500ms"  # never longer than the interval
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:9464"]
    with pytest.raises(ValueError, match="host:port"):
        PrometheusConfig(targets=("nohost",))


def test_rewardbus_prometheus_serves_until_sigterm(
    metered: Metered, prometheus_binary: Path
) -> None:
    del prometheus_binary  # the command finds the same cached build
    argv = [sys.executable, "-m", "rewardbus", "prometheus", "--port", "0",
            "--scrape-interval", "0.5", "--rules", str(RULES)]  # fmt: skip
    for target in metered.targets:
        argv += ["--target", target]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"Prometheus ready at (http://127\.0\.0\.1:\d+), scraping 2 target", line)
        assert found, line + (proc.stderr.read() if proc.stderr else "")
        url = found.group(1)
        with urllib.request.urlopen(f"{url}/-/ready", timeout=5) as reply:
            assert reply.status == 200
        until_sync(lambda: _value(url, "sum(rewardbus_worker_live)") == 1, "a scrape", timeout_s=60)
        with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=5) as reply:
            rules = reply.read().decode()
        assert "RewardbusNoLiveWorkers" in rules
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
