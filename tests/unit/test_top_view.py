"""``rewardbus top``'s pure frame: rates, percentiles and the rendered text."""

from __future__ import annotations

import re

import pytest

from rewardbus.observability.top_view import Series, build_frame, quantile, render

W = {"worker_id": "w-1"}


def _snapshot(completions: float, exec_ms: float, buckets: dict[str, float]) -> list[Series]:
    series = [
        Series("rewardbus_worker_completions_total", W, completions),
        Series("rewardbus_worker_rewards_total", {**W, "verdict": "accepted"}, completions - 1),
        Series("rewardbus_worker_rewards_total", {**W, "verdict": "wrong_answer"}, 1),
        Series("rewardbus_worker_cache_hits_total", W, 1),
        Series("rewardbus_worker_execution_milliseconds_sum", {**W, "verdict": "ok"}, exec_ms),
        Series("rewardbus_worker_concurrency", W, 2),
        Series("rewardbus_worker_in_flight", W, 1),
        Series("rewardbus_worker_utilisation", W, 0.5),
        Series("rewardbus_worker_consumer_lag", {**W, "topic": "c", "partition": "1"}, 7),
        Series("rewardbus_aggregator_consumer_lag", {"topic": "r", "partition": "0"}, 0),
        Series("rewardbus_aggregator_reward_mean", {}, 0.25),
    ]
    series += [
        Series("rewardbus_worker_reward_latency_milliseconds_bucket", {**W, "le": le}, count)
        for le, count in buckets.items()
    ]
    return series


def test_quantile_interpolates_within_a_bucket_like_prometheus() -> None:
    buckets = {10.0: 0.0, 20.0: 10.0, float("inf"): 10.0}
    assert quantile(0.5, buckets) == pytest.approx(15.0)
    assert quantile(0.99, buckets) == pytest.approx(19.9)
    assert quantile(0.5, {10.0: 0.0, float("inf"): 0.0}) is None
    assert quantile(0.5, {10.0: 0.0, float("inf"): 4.0}) == 10.0  # all past the last bound


def test_rates_and_percentiles_come_from_the_growth_between_snapshots() -> None:
    before = _snapshot(10, 1000, {"10": 5, "100": 10, "+Inf": 10})
    # 20 more, all between 100 and 1000 ms; 8 s of execution over 4 s on 2 slots.
    after = _snapshot(30, 9000, {"10": 5, "100": 10, "1000": 30, "+Inf": 30})
    before.append(Series("rewardbus_worker_reward_latency_milliseconds_bucket", {"le": "1000"}, 10))
    frame = build_frame(before, after, 4.0)
    assert frame.completions_per_s == pytest.approx(5.0)
    assert frame.latency_windowed
    assert frame.p50_ms == pytest.approx(550.0)
    assert frame.verdicts == {"accepted": 29, "wrong_answer": 1}
    assert frame.cache_hit_rate == pytest.approx(1 / 30)
    assert frame.lags == {("workers", "c", "1"): 7, ("aggregator", "r", "0"): 0}
    (row,) = frame.workers
    assert (row.worker_id, row.completions_per_s, row.utilisation) == ("w-1", 5.0, 1.0)
    assert frame.reward_mean == 0.25


def test_a_single_snapshot_has_no_rates_and_says_latency_is_all_time() -> None:
    frame = build_frame(None, _snapshot(3, 0, {"10": 3, "+Inf": 3}), None, sources=("u",))
    assert frame.completions_per_s is None
    assert not frame.latency_windowed
    assert frame.workers[0].utilisation == 0.5  # the gauge, without a window
    text = render(frame)
    assert "\x1b" not in text  # plain: no terminal control codes
    assert re.search(
        r"^latency \(produce->reward\) +p50 5 ms +p99 10 ms +\(all observations so far\)$",
        text,
        re.M,
    )
    assert re.search(r"^completions/s +- +total 3$", text, re.M)


def test_render_lists_verdicts_lags_and_workers_within_the_width() -> None:
    before = _snapshot(10, 0, {"+Inf": 10})
    frame = build_frame(before, _snapshot(12, 500, {"+Inf": 12}), 2.0, sources=("a", "b"))
    text = render(frame, width=72)
    lines = text.splitlines()
    assert lines[0] == "rewardbus top - last 2.0 s - 2 source(s)"
    assert all(len(line) <= 72 for line in lines)
    assert any(line.lstrip().startswith("accepted") and "91.7%" in line for line in lines)
    assert any(line.split() == ["workers", "c[1]", "7"] for line in lines)
    assert any(line.split() == ["aggregator", "r[0]", "0"] for line in lines)
    assert any(line.lstrip().startswith("w-1") and "1/2" in line for line in lines)
    assert re.search(r"^cache hit rate +8\.3%$", text, re.M)
    assert re.search(r"^completions/s +1\.0 +total 12$", text, re.M)


def test_render_for_a_terminal_has_colours_within_the_width() -> None:
    frame = build_frame(None, _snapshot(3, 0, {"+Inf": 3}), None, sources=("u",))
    text = render(frame, width=60, terminal=True)
    assert "\x1b[" in text
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert all(len(line) <= 60 for line in plain.splitlines())
    assert plain.splitlines()[0] == "rewardbus top - one snapshot - 1 source(s)"


def test_unreachable_sources_are_named_on_the_frame() -> None:
    frame = build_frame(None, [], None, sources=("http://x",), errors=("http://x: refused",))
    assert "! http://x: refused" in render(frame)
    assert "workers (none reporting)" in render(frame)
    assert "verdicts (none yet)" in render(frame)


def _tools(calls_ok: float, buckets: dict[str, float]) -> list[Series]:
    return [
        Series("rewardbus_tools_calls_total", {**W, "status": "ok"}, calls_ok),
        Series("rewardbus_tools_calls_total", {**W, "status": "time_limit"}, 2),
        Series("rewardbus_tools_calls_total", {**W, "status": "memory_limit"}, 0),
        Series("rewardbus_tools_sessions", W, 30),
        Series("rewardbus_tools_session_memory_bytes", W, 120 << 20),
        Series("rewardbus_tools_rebuilds_total", {**W, "reason": "not_held"}, 3),
        Series("rewardbus_tools_rebuilds_total", {**W, "reason": "evicted"}, 1),
        Series("rewardbus_tools_rebuilds_total", {**W, "reason": "expired"}, 0),
        Series("rewardbus_tools_evictions_total", W, 1),
        Series("rewardbus_tools_consumer_lag", {**W, "topic": "t", "partition": "2"}, 4),
        *(
            Series("rewardbus_tools_execution_milliseconds_bucket", {**W, "le": le}, n)
            for le, n in buckets.items()
        ),
    ]


def test_a_worker_serving_tool_calls_gets_a_tool_section() -> None:
    before = _snapshot(10, 0, {"+Inf": 10}) + _tools(100, {"1.0": 50, "10.0": 100, "+Inf": 102})
    after = _snapshot(12, 0, {"+Inf": 12}) + _tools(120, {"1.0": 70, "10.0": 120, "+Inf": 122})
    frame = build_frame(before, after, 2.0)
    assert frame.tools is not None
    assert frame.tools.calls_per_s == 10.0
    assert frame.tools.exec_p50_ms == 0.5  # the 20 calls of the window, all under 1 ms
    text = render(frame, width=100)
    assert re.search(r"^calls/s +10\.0 +total 122: ok 120, time_limit 2$", text, re.M)
    assert re.search(r"^live sessions +30 +120 MB in all$", text, re.M)
    assert re.search(r"^rebuilt sessions +4 +evicted 1, not_held 3; evicted 1$", text, re.M)
    assert any(line.split() == ["tools", "t[2]", "4"] for line in text.splitlines())


def test_no_tool_section_without_a_tool_service() -> None:
    frame = build_frame(None, _snapshot(3, 0, {"+Inf": 3}), None)
    assert frame.tools is None
    assert "tool calls" not in render(frame, width=80)
