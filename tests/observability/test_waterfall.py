"""OTLP JSON to spans, span trees and the terminal waterfall: pure functions, no Jaeger."""

from __future__ import annotations

import base64
import json
from typing import Any

from rewardbus.observability.console import render_text
from rewardbus.observability.otlp import build_forest, context_of, spans_from_otlp, subtree_of
from rewardbus.observability.trace_view import BatchTrace, SampleTrace, render_batch, render_sample
from rewardbus.observability.waterfall import (
    SLOWEST_MARK,
    WaterfallStyle,
    render_waterfall,
    self_time_ns,
    slowest,
    tree_json,
    waterfall,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
T0 = 1_764_590_000_000_000_000  # ns


def _span(
    span_id: str,
    name: str,
    start_ms: float,
    end_ms: float,
    parent: str = "",
    attributes: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": span_id,
        "name": name,
        "kind": extra.pop("kind", "SPAN_KIND_INTERNAL"),
        "startTimeUnixNano": str(T0 + int(start_ms * 1e6)),
        "endTimeUnixNano": str(T0 + int(end_ms * 1e6)),
        "attributes": [
            {"key": key, "value": _value(value)} for key, value in (attributes or {}).items()
        ],
        **extra,
    }
    if parent:
        raw["parentSpanId"] = parent
    return raw


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # OTLP JSON writes 64-bit integers as strings
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _resource(service: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}],
    }


def _sample_document() -> dict[str, Any]:
    sample = {"rewardbus.sample_id": "s1"}
    trainer = [
        _span("a000000000000001", "trainer step", 0, 500),
        _span(
            "a000000000000002",
            "publish completion",
            1,
            3,
            "a000000000000001",
            sample,
            kind="SPAN_KIND_PRODUCER",
        ),
        _span(
            "a000000000000009",
            "publish completion",
            2,
            4,
            "a000000000000001",
            {"rewardbus.sample_id": "s2"},
        ),
    ]
    worker = [
        _span("b000000000000001", "queue wait", 1, 101, "a000000000000002"),
        _span(
            "b000000000000002",
            "judge completion",
            101,
            161,
            "a000000000000002",
            {**sample, "rewardbus.verdict": "wrong_answer", "rewardbus.score": 0.5},
            kind=5,  # numeric enums are accepted too
        ),
        _span(
            "b000000000000003", "test", 110, 130, "b000000000000002", {"rewardbus.test.index": 0}
        ),
        _span(
            "b000000000000004",
            "test",
            130,
            150,
            "b000000000000002",
            {"rewardbus.test.index": 1},
            status={"code": "STATUS_CODE_ERROR", "message": "wrong_answer"},
        ),
        _span("b000000000000005", "emit reward", 150, 160, "b000000000000002"),
    ]
    aggregator = [
        _span("c000000000000001", "aggregate", 162, 163, "b000000000000005", sample),
    ]
    return {
        "result": {
            "resourceSpans": [
                _resource("rewardbus-trainer", trainer),
                _resource("rewardbus-worker", worker),
                _resource("rewardbus-aggregator", aggregator),
            ]
        }
    }


def test_spans_are_read_from_otlp_json() -> None:
    spans = {s.span_id: s for s in spans_from_otlp(_sample_document())}
    judge = spans["b000000000000002"]
    assert judge.service == "rewardbus-worker"
    assert judge.kind == "consumer"
    assert judge.parent_id == "a000000000000002"
    assert judge.attributes["rewardbus.score"] == 0.5
    assert judge.duration_ns == 60_000_000
    assert spans["b000000000000003"].attributes["rewardbus.test.index"] == 0
    assert spans["b000000000000004"].failed
    assert spans["b000000000000004"].status_message == "wrong_answer"
    assert spans["a000000000000002"].kind == "producer"


def test_base64_ids_and_links_are_hex() -> None:
    raw_trace = bytes.fromhex(TRACE)
    link = {
        "traceId": base64.b64encode(raw_trace).decode(),
        "spanId": base64.b64encode(bytes.fromhex("c000000000000001")).decode(),
    }
    doc = {
        "resourceSpans": [
            _resource(
                "agg",
                [
                    {
                        **_span("d000000000000001", "emit scored batch", 0, 1),
                        "traceId": base64.b64encode(raw_trace).decode(),
                        "links": [link],
                    }
                ],
            )
        ]
    }
    (span,) = spans_from_otlp(doc)
    assert span.trace_id == TRACE
    assert span.links[0].trace_id == TRACE
    assert span.links[0].span_id == "c000000000000001"


def test_a_sample_is_cut_out_of_a_shared_trace() -> None:
    spans = spans_from_otlp(_sample_document())
    own = {s.name for s in subtree_of(spans, "rewardbus.sample_id", "s1")}
    assert own == {
        "publish completion",
        "queue wait",
        "judge completion",
        "test",
        "emit reward",
        "aggregate",
    }
    ids = {s.span_id for s in subtree_of(spans, "rewardbus.sample_id", "s1")}
    assert "a000000000000009" not in ids  # the other sample's publish
    assert [s.name for s in context_of(spans, "rewardbus.sample_id", "s1")] == ["trainer step"]


def test_tree_orders_children_by_start() -> None:
    spans = subtree_of(spans_from_otlp(_sample_document()), "rewardbus.sample_id", "s1")
    (root,) = build_forest(spans)
    assert root.span.name == "publish completion"
    assert [c.span.name for c in root.children] == ["queue wait", "judge completion"]
    judge = root.children[1]
    assert [c.span.name for c in judge.children] == ["test", "test", "emit reward"]
    order = [node.span.name for _depth, node in root.walk()]
    assert order.index("aggregate") == order.index("emit reward") + 1


def test_self_time_and_slowest() -> None:
    spans = subtree_of(spans_from_otlp(_sample_document()), "rewardbus.sample_id", "s1")
    (root,) = build_forest(spans)
    judge = root.children[1]
    # 60 ms, of which 110-160 is covered by its children.
    assert self_time_ns(judge) == 10_000_000
    worst = slowest([root])
    assert worst is not None
    assert worst[0].name == "queue wait"
    assert worst[1] == 100_000_000


def _cells(line: str) -> list[str]:
    """A table row's cells, the one space of padding each side removed (indentation kept)."""
    first, *rest = line.split("│")
    return [first.strip(), *(cell[1:].rstrip() for cell in rest)]


def test_waterfall_lines() -> None:
    spans = subtree_of(spans_from_otlp(_sample_document()), "rewardbus.sample_id", "s1")
    text = render_waterfall(spans, title="sample s1", style=WaterfallStyle(bar_width=20))
    assert "\x1b" not in text  # plain: no colours, no control codes
    lines = text.splitlines()
    assert lines[0] == "sample s1"
    assert lines[1].startswith("7 spans, 3 services, 162.0 ms")
    header = _cells(lines[2])
    assert header[:4] == ["start ms", "dur ms", "span", "service"]
    assert header[4] == "0" + "162 ms".rjust(19)  # the time axis over the bars
    body = [_cells(line) for line in lines[4:-1]]
    assert [row[2].strip() for row in body] == [
        "publish completion", "queue wait", "judge completion", "test", "test", "emit reward",
        "aggregate",
    ]  # fmt: skip
    queue = next(row for row in body if row[2].strip() == "queue wait")
    assert SLOWEST_MARK in queue[5]
    assert [cell.strip() for cell in queue[:2]] == ["0.0", "100.0"]
    assert queue[3] == "rewardbus-worker"
    # The bar of the queue wait covers the first ~60% of the axis.
    bar = lines[4 + body.index(queue)].split("│")[4][1:-1]
    assert len(bar) == 20
    assert bar.startswith("█" * 12)
    assert bar.endswith(" " * 7)
    # A 1 ms span at the end of the axis still shows as one character.
    assert lines[4 + len(body) - 1].split("│")[4][1:-1] == " " * 19 + "█"
    failing = [row for row in body if "ERROR" in row[5]]
    assert len(failing) == 1
    assert "test=1" in failing[0][5]
    judge = next(row for row in body if "judge" in row[2])
    assert "verdict=wrong_answer score=0.5" in judge[5]
    assert body[3][2] == "    test"  # indented under judge completion
    assert lines[-1].startswith("slowest: queue wait (rewardbus-worker) 100.0 ms on its own, 62%")


def test_waterfall_on_a_terminal_has_colours_and_fits_its_width() -> None:
    spans = subtree_of(spans_from_otlp(_sample_document()), "rewardbus.sample_id", "s1")
    view = waterfall(spans, title="sample s1", style=WaterfallStyle(bar_width=20))
    coloured = render_text(view, terminal=True, width=80)
    assert "\x1b[" in coloured
    plain = render_text(view, terminal=False, width=80)
    assert all(len(line) <= 80 for line in plain.splitlines())
    queue = next(line for line in plain.splitlines() if "████████████" in line)
    # The times and the bar keep their width; the text columns gave way.
    assert [cell.strip() for cell in _cells(queue)[:2]] == ["0.0", "100.0"]
    assert SLOWEST_MARK in queue


def test_json_tree() -> None:
    spans = subtree_of(spans_from_otlp(_sample_document()), "rewardbus.sample_id", "s1")
    (root,) = tree_json(spans)
    assert root["name"] == "publish completion"
    assert root["start_offset_ms"] == 0.0
    judge = root["children"][1]
    assert judge["service"] == "rewardbus-worker"
    assert judge["start_offset_ms"] == 100.0
    assert judge["duration_ms"] == 60.0
    assert [c["attributes"].get("rewardbus.test.index") for c in judge["children"][:2]] == [0, 1]
    json.dumps(root)  # serialisable as it is


def test_sample_and_batch_views() -> None:
    spans = spans_from_otlp(_sample_document())
    sample = SampleTrace(
        "s1",
        tuple(subtree_of(spans, "rewardbus.sample_id", "s1")),
        tuple(context_of(spans, "rewardbus.sample_id", "s1")),
    )
    text = render_sample(sample, as_json=False)
    assert text.splitlines()[1] == "within: trainer step (rewardbus-trainer)"
    document = json.loads(render_sample(sample, as_json=True))
    assert document["trace_ids"] == [TRACE]
    assert document["within"] == [{"name": "trainer step", "service": "rewardbus-trainer"}]

    batch_doc = {
        "resourceSpans": [
            _resource(
                "rewardbus-aggregator",
                [
                    _span(
                        "e000000000000001",
                        "emit scored batch",
                        170,
                        172,
                        attributes={"rewardbus.batch_id": "b"},
                    )
                ],
            )
        ]
    }
    batch = BatchTrace("b", tuple(spans_from_otlp(batch_doc)), (sample,))
    lines = render_batch(batch, as_json=False).splitlines()
    assert lines[0].startswith("batch b: 1 linked samples")
    row = next(line for line in lines if " s1 " in line)
    assert "(sample)" in row  # no worker id among its attributes
    assert "ERROR" not in row  # a failing test is the verdict, not an infrastructure error
    assert "verdict=wrong_answer" in row
    assert any("emit scored batch" in line for line in lines)
    parsed = json.loads(render_batch(batch, as_json=True))
    assert parsed["samples"][0]["slowest_span"]["name"] == "queue wait"
    assert parsed["samples"][0]["duration_ms"] == 162.0


def test_empty() -> None:
    assert render_waterfall([]) == "(no spans)"
    assert render_waterfall([], title="sample s9") == "sample s9\n  (no spans)"
    assert tree_json([]) == []
