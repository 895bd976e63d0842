"""infra/grafana/rewardbus.json: importable as is, and every panel queries only metrics
that a live worker and aggregator export (read from their /metrics, not from a list).

Grafana itself (AGPL) is not installed. Each panel's PromQL also runs on the real
Prometheus that scrapes the metered pipeline, which shows it parses and finds series.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rewardbus.observability.prometheus import PrometheusProcess, query
from rewardbus.observability.top import scrape
from tests.observability.metered import Metered
from tests.support.poll import until_sync

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "infra" / "grafana" / "rewardbus.json"
# What Grafana substitutes before it sends a query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s"}


def _dashboard() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return document


def _exprs() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in _dashboard()["panels"]
        for target in panel["targets"]
    ]


def test_the_dashboard_is_importable_as_is() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "rewardbus"
    assert "id" not in dashboard  # Grafana assigns it on import
    (variable,) = dashboard["templating"]["list"]
    assert (variable["type"], variable["query"], variable["name"]) == (
        "datasource", "prometheus", "datasource",
    )  # fmt: skip
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert target["refId"]
            assert target["expr"].strip()


def test_every_panel_names_only_metrics_the_services_export(metered: Metered) -> None:
    exported = {s.name for url in metered.urls for s in scrape(url)}
    for title, expr in _exprs():
        # A selector: a name followed by its labels or range (label names are not).
        named = set(re.findall(r"\b[a-z_:][a-z0-9_:]*(?=\s*[{\[])", expr)) - _PROMQL_WORDS
        ours = set(re.findall(r"\brewardbus_[a-z0-9_]+", expr))
        assert ours, f"{title}: {expr} names no rewardbus metric"
        assert named <= ours | _PROMQL_WORDS, f"{title}: {named - ours} are not ours"
        assert ours <= exported, f"{title}: {sorted(ours - exported)} are not exported"


def test_every_panel_query_runs_and_finds_series(
    metered: Metered, prometheus: PrometheusProcess
) -> None:
    url = prometheus.config.url
    # rate() needs two samples in its window, from each target: the worker and the
    # aggregator are scraped independently, so one target's scrapes say nothing of the other's.
    for instance in metered.targets:
        two = f'count_over_time(up{{instance="{instance}"}}[1m]) > 1'
        until_sync(partial(_finds_series, url, two), f"two scrapes of {instance}", timeout_s=60)
    for title, expr in _exprs():
        promql = expr
        for variable, value in GRAFANA_VARIABLES.items():
            promql = promql.replace(variable, value)
        # A scrape can still time out on a loaded machine: a deadline per panel, not one try.
        until_sync(
            partial(_finds_series, url, promql), f"{title}: {promql} to find series", timeout_s=60
        )


def _finds_series(url: str, promql: str) -> bool:
    return bool(query(url, promql))


# Functions and keywords of PromQL that precede "(" and are not metric names.
_PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "rate",
    "increase", "irate", "deriv", "histogram_quantile", "and", "or", "unless", "offset",
}  # fmt: skip
