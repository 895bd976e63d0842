"""``rewardbus top --once`` as a subprocess against the live metered pipeline."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rewardbus.observability.prometheus import PrometheusProcess, query
from tests.observability.metered import ACCEPTED, DEAD, WRONG, Metered
from tests.support.poll import until_sync

pytestmark = pytest.mark.integration


def _top(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "rewardbus", "top", "--once", "--width", "100", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _check_frame(text: str, metered: Metered, sources: int) -> None:
    lines = text.splitlines()
    assert lines[0].endswith(f"{sources} source(s)")
    assert f"total {ACCEPTED + WRONG + DEAD}" in text
    assert re.search(rf"^accepted +{ACCEPTED} +", text, re.M), text
    assert re.search(rf"^wrong_answer +{WRONG} +", text, re.M), text
    assert re.search(r"^cache hit rate +0\.0%$", text, re.M), text
    assert "last batch reward mean 0.667" in text
    completions = metered.kafka.topics.completions
    for partition in range(metered.partitions):
        assert any(
            line.split()[:2] == ["workers", f"{completions}[{partition}]"] and line.endswith(" 0")
            for line in lines
        ), text
    worker = [line for line in lines if line.strip().startswith(metered.worker_id)]
    assert len(worker) == 1, text
    assert "0/2" in worker[0]  # idle, two slots
    # The workload's latencies are there.
    assert re.search(r"^latency \(produce->reward\) +p50 \d+ ms +p99 \d+ ms", text, re.M), text
    assert "\x1b" not in text  # a pipe gets plain text
    assert "\n! " not in text  # every source answered


def test_top_once_from_the_metrics_endpoints(metered: Metered) -> None:
    text = _top("--metrics", metered.worker_url, "--metrics", metered.aggregator_url,
                "--interval", "0.5")  # fmt: skip
    assert "last 0." in text.splitlines()[0]  # two scrapes half a second apart
    _check_frame(text, metered, sources=2)


def test_top_once_from_prometheus(metered: Metered, prometheus: PrometheusProcess) -> None:
    url = prometheus.config.url

    def scraped() -> bool:
        found = query(url, "sum(rewardbus_worker_completions_total)")
        return bool(found) and found[0].value == ACCEPTED + WRONG + DEAD

    until_sync(scraped, "Prometheus to scrape the worker", timeout_s=60)
    until_sync(
        lambda: bool(query(url, "rewardbus_aggregator_reward_mean")), "the aggregator", timeout_s=60
    )
    text = _top("--prometheus", url, "--window", "5")
    assert text.splitlines()[0] == "rewardbus top - last 5.0 s - 1 source(s)"
    _check_frame(text, metered, sources=1)


def test_top_names_an_endpoint_that_does_not_answer() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rewardbus", "top", "--once", "--interval", "0.1",
         "--metrics", "http://127.0.0.1:9/metrics"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "! http://127.0.0.1:9/metrics:" in done.stdout
