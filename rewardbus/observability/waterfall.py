"""A trace as a terminal waterfall, or as a JSON span tree. Pure: spans in, text out.

Each line is one span: its start offset and duration in milliseconds, its name
indented under its parent, its service, a bar placed on the trace's time axis,
and the attributes that say what happened (verdict, score, cache hit, test).
The span that spent the most time on its own (its duration less its children's)
is marked: that is where the sample's time went.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewardbus.observability.otlp import SpanNode, SpanRecord, build_forest

__all__ = ["WaterfallStyle", "render_waterfall", "self_time_ns", "slowest", "tree_json"]

# Shown after the bar, in this order, when a span has them.
NOTE_ATTRIBUTES = (
    ("rewardbus.verdict", "verdict"),
    ("rewardbus.score", "score"),
    ("rewardbus.cache_hit", "cache_hit"),
    ("rewardbus.test.index", "test"),
    ("rewardbus.test.count", "tests"),
    ("rewardbus.language", "lang"),
    ("rewardbus.worker_id", "worker"),
    ("messaging.destination.partition.id", "partition"),
    ("messaging.kafka.offset", "offset"),
    ("rewardbus.batch.size", "samples"),
    ("rewardbus.outcome", "outcome"),
)
SLOWEST_MARK = "◀ slowest"


@dataclass(frozen=True, slots=True)
class WaterfallStyle:
    """Column widths; ``bar_width`` characters span the whole trace."""

    bar_width: int = 40
    name_width: int = 34
    service_width: int = 20
    notes: bool = True


def render_waterfall(
    spans: Sequence[SpanRecord], *, title: str = "", style: WaterfallStyle | None = None
) -> str:
    """The waterfall of ``spans`` (one trace, or the part of it one sample owns)."""
    style = style or WaterfallStyle()
    if not spans:
        return f"{title}\n  (no spans)" if title else "(no spans)"
    forest = build_forest(spans)
    origin = min(span.start_ns for span in spans)
    total = max(1, max(span.end_ns for span in spans) - origin)
    worst = slowest(forest)
    lines = [title] if title else []
    lines.append(_header(spans, total, style))
    for root in forest:
        for depth, node in root.walk():
            marked = worst is not None and node.span is worst[0]
            lines.append(_line(node, depth, origin=origin, total=total, style=style, worst=marked))
    if worst is not None:
        span, own = worst
        lines.append(
            f"slowest: {span.name} ({span.service}) {own / 1e6:.1f} ms on its own, "
            f"{100 * own / total:.0f}% of {total / 1e6:.1f} ms"
        )
    return "\n".join(lines)


def _header(spans: Sequence[SpanRecord], total: int, style: WaterfallStyle) -> str:
    services = len({span.service for span in spans})
    summary = f"{len(spans)} spans, {services} services, {total / 1e6:.1f} ms"
    end = f"{total / 1e6:.0f} ms"
    axis = "0" + end.rjust(style.bar_width - 1) if style.bar_width > len(end) + 1 else ""
    head = (
        f"{'start ms':>9} {'dur ms':>9}  {'span':<{style.name_width}} "
        f"{'service':<{style.service_width}} |{axis:<{style.bar_width}}|"
    )
    return f"{summary}\n{head}"


def _line(
    node: SpanNode, depth: int, *, origin: int, total: int, style: WaterfallStyle, worst: bool
) -> str:
    span = node.span
    start_ms = (span.start_ns - origin) / 1e6
    name = _clip(("  " * depth) + span.name, style.name_width)
    service = _clip(span.service, style.service_width)
    bar = _bar(span.start_ns - origin, span.duration_ns, total, style.bar_width)
    text = (
        f"{start_ms:9.1f} {span.duration_ns / 1e6:9.1f}  {name:<{style.name_width}} "
        f"{service:<{style.service_width}} |{bar}|"
    )
    notes = _notes(span) if style.notes else ""
    if worst:
        notes = f"{SLOWEST_MARK} {notes}".rstrip()
    return f"{text} {notes}".rstrip()


def _bar(offset: int, duration: int, total: int, width: int) -> str:
    first = min(width - 1, offset * width // total)
    last = max(first + 1, min(width, -(-(offset + duration) * width // total)))
    return " " * first + "█" * (last - first) + " " * (width - last)


def _notes(span: SpanRecord) -> str:
    parts = []
    for key, label in NOTE_ATTRIBUTES:
        if key in span.attributes:
            value = span.attributes[key]
            if isinstance(value, float):
                value = f"{value:g}"
            parts.append(f"{label}={value}")
    if span.failed:
        parts.append(f"ERROR {span.status_message}".rstrip())
    return " ".join(parts)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def self_time_ns(node: SpanNode) -> int:
    """A span's duration less the time covered by its children (their union, clipped)."""
    span = node.span
    covered = 0
    cursor = span.start_ns
    for child in sorted(node.children, key=lambda c: c.span.start_ns):
        start = max(cursor, child.span.start_ns, span.start_ns)
        end = min(child.span.end_ns, span.end_ns)
        if end > start:
            covered += end - start
            cursor = end
    return max(0, span.duration_ns - covered)


def slowest(forest: Sequence[SpanNode]) -> tuple[SpanRecord, int] | None:
    """The span with the largest self time (where the time went), and that time in ns."""
    best: tuple[SpanRecord, int] | None = None
    for root in forest:
        for _depth, node in root.walk():
            own = self_time_ns(node)
            if best is None or own > best[1]:
                best = (node.span, own)
    return best


def tree_json(spans: Sequence[SpanRecord]) -> list[dict[str, Any]]:
    """The span tree as JSON-ready dicts (times as offsets from the first span, in ms)."""
    if not spans:
        return []
    origin = min(span.start_ns for span in spans)
    return [_node_json(root, origin) for root in build_forest(spans)]


def _node_json(node: SpanNode, origin: int) -> dict[str, Any]:
    span = node.span
    return {
        "name": span.name,
        "service": span.service,
        "kind": span.kind,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_id,
        "start_offset_ms": round((span.start_ns - origin) / 1e6, 3),
        "duration_ms": round(span.duration_ns / 1e6, 3),
        "self_ms": round(self_time_ns(node) / 1e6, 3),
        "status": span.status,
        "status_message": span.status_message,
        "attributes": {
            k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()
        },
        "links": [{"trace_id": link.trace_id, "span_id": link.span_id} for link in span.links],
        "children": [_node_json(child, origin) for child in node.children],
    }
