"""The worker's and aggregator's live /metrics hold what the session's workload did.

The services are real processes on the real broker (tests/observability/metered.py);
every number is read from their Prometheus endpoints, as a scraper would.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rewardbus.observability.top import scrape
from tests.observability.metered import ACCEPTED, DEAD, RESPONSE_LENGTH, WRONG, Metered, total
from tests.support.poll import until_sync

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_worker_counts_match_the_workload(metered: Metered) -> None:
    url = metered.worker_url
    mine = {"worker_id": metered.worker_id}
    assert total(url, "rewardbus_worker_completions_total", **mine) == ACCEPTED + WRONG + DEAD
    rewards = "rewardbus_worker_rewards_total"
    assert total(url, rewards, verdict="accepted", language="python", **mine) == ACCEPTED
    assert total(url, rewards, verdict="wrong_answer", language="python", **mine) == WRONG
    assert total(url, rewards) == ACCEPTED + WRONG
    assert total(url, "rewardbus_worker_dead_letters_total", stage="decode") == DEAD
    assert total(url, "rewardbus_worker_sandbox_errors_total") == 0
    # Every distinct program ran: no cache hits, one execution each.
    assert total(url, "rewardbus_worker_cache_hits_total") == 0
    assert total(url, "rewardbus_worker_execution_milliseconds_count") == ACCEPTED + WRONG
    assert total(url, "rewardbus_worker_reward_latency_milliseconds_count") == ACCEPTED + WRONG
    assert total(url, "rewardbus_worker_queue_wait_milliseconds_count") == ACCEPTED + WRONG
    scores = "rewardbus_worker_reward_score"
    assert total(url, f"{scores}_sum") == ACCEPTED  # 1.0 each; the wrong ones pass none
    assert total(url, f"{scores}_bucket", le="0.0") == WRONG
    lengths = "rewardbus_worker_response_length"
    assert total(url, f"{lengths}_sum") == RESPONSE_LENGTH * (ACCEPTED + WRONG)


def _reads_zero(url: str, gauge: str) -> None:
    """A gauge the service samples about once a second (lag, open batches) reads 0 at
    its next sample: a scrape right after the workload may still see the last one."""
    until_sync(lambda: total(url, gauge) == 0, f"{gauge} to read 0", timeout_s=10)


def test_worker_gauges_describe_the_running_worker(metered: Metered) -> None:
    url = metered.worker_url
    assert total(url, "rewardbus_worker_live", worker_id=metered.worker_id) == 1
    assert total(url, "rewardbus_worker_concurrency", worker_id=metered.worker_id) == 2
    assert total(url, "rewardbus_worker_in_flight") == 0  # idle after the workload
    assert total(url, "rewardbus_worker_utilisation") == 0
    lags = [s for s in scrape(url) if s.name == "rewardbus_worker_consumer_lag"]
    completions = metered.kafka.topics.completions
    # One series per partition of the completions topic, each caught up.
    assert sorted(s.labels["partition"] for s in lags) == [
        str(p) for p in range(metered.partitions)
    ]
    assert {s.labels["topic"] for s in lags} == {completions}
    _reads_zero(url, "rewardbus_worker_consumer_lag")


def test_latency_histograms_have_millisecond_buckets(metered: Metered) -> None:
    bounds = {
        s.labels["le"]
        for s in scrape(metered.worker_url)
        if s.name == "rewardbus_worker_reward_latency_milliseconds_bucket"
    }
    assert {"1.0", "100.0", "1000.0", "60000.0", "+Inf"} <= bounds


def test_aggregator_reports_the_scored_batch(metered: Metered) -> None:
    url = metered.aggregator_url
    assert total(url, "rewardbus_aggregator_batches_total", complete="true") == 1
    assert total(url, "rewardbus_aggregator_rewards_total") == ACCEPTED + WRONG
    assert total(url, "rewardbus_aggregator_manifests_total") == 1
    mean = ACCEPTED / (ACCEPTED + WRONG)
    assert total(url, "rewardbus_aggregator_reward_mean") == pytest.approx(mean)
    assert total(url, "rewardbus_aggregator_batch_reward_mean_count") == 1
    assert total(url, "rewardbus_aggregator_reward_mean_falls") == 0  # one step: no fall
    _reads_zero(url, "rewardbus_aggregator_open_batches")
    lags = [s for s in scrape(url) if s.name == "rewardbus_aggregator_consumer_lag"]
    topics = metered.kafka.topics
    assert {s.labels["topic"] for s in lags} == {topics.manifests, topics.rewards}
    _reads_zero(url, "rewardbus_aggregator_consumer_lag")


def test_every_series_names_its_service(metered: Metered) -> None:
    services = ("rewardbus-worker", "rewardbus-aggregator")
    for url, service in zip(metered.urls, services, strict=True):
        ours = [s for s in scrape(url) if s.name.startswith("rewardbus_")]
        assert ours
        assert {s.labels.get("service_name") for s in ours} == {service}


def test_docs_list_every_exported_metric(metered: Metered) -> None:
    """docs/metrics.md names each family the services export, by its Prometheus name."""
    exported = {
        re.sub(r"_(bucket|sum|count|total|created)$", "", s.name)
        for url in metered.urls
        for s in scrape(url)
        if s.name.startswith("rewardbus_")
    }
    documented = set(re.findall(r"`(rewardbus_[a-z0-9_]+?)(?:_total|_bucket)?`", DOC.read_text()))
    missing = sorted(exported - documented)
    assert missing == [], f"exported but not in docs/metrics.md: {missing}"
