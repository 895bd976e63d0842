"""A trace as a terminal waterfall, or as a JSON span tree. Pure: spans in, text out.

The waterfall is a ``rich`` table, one row per span: its start offset and
duration in milliseconds, its name indented under its parent, its service, a bar
(``rich.bar.Bar``) placed on the trace's time axis, and the attributes that say
what happened (verdict, score, cache hit, test). On a terminal it has colours
(a colour per service, errors in red); otherwise it is plain text whose columns
are separated by "│".
The span that spent the most time on its own (its duration less its children's)
is marked: that is where the sample's time went.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.bar import Bar
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rewardbus.observability.console import render_text
from rewardbus.observability.otlp import SpanNode, SpanRecord, build_forest

__all__ = [
    "WaterfallStyle",
    "render_waterfall",
    "self_time_ns",
    "slowest",
    "tree_json",
    "waterfall",
]

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
    """Column widths; ``bar_width`` characters span the whole trace.

    ``terminal``: colours, at the terminal's width (columns shrink to fit, cut with
    "…"); otherwise plain text whose rows are never cut.
    """

    bar_width: int = 40
    name_width: int = 34
    service_width: int = 20
    notes: bool = True
    terminal: bool = False


# A colour per service, in order of first appearance.
_SERVICE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "bright_red")


def render_waterfall(
    spans: Sequence[SpanRecord], *, title: str = "", style: WaterfallStyle | None = None
) -> str:
    """The waterfall of ``spans`` (one trace, or the part of it one sample owns) as text."""
    style = style or WaterfallStyle()
    return render_text(waterfall(spans, title=title, style=style), terminal=style.terminal)


def waterfall(
    spans: Sequence[SpanRecord], *, title: str = "", style: WaterfallStyle | None = None
) -> RenderableType:
    """The waterfall as a ``rich`` renderable: title, summary, the span table, the slowest."""
    style = style or WaterfallStyle()
    head = [Text(title)] if title else []
    if not spans:
        return Group(*head, Text("  (no spans)" if title else "(no spans)"))
    forest = build_forest(spans)
    origin = min(span.start_ns for span in spans)
    total = max(1, max(span.end_ns for span in spans) - origin)
    worst = slowest(forest)
    colours = _service_colours(spans)
    table = _table(total, style)
    for root in forest:
        for depth, node in root.walk():
            marked = worst is not None and node.span is worst[0]
            row = _row(
                node.span,
                depth,
                origin=origin,
                total=total,
                style=style,
                colours=colours,
                worst=marked,
            )
            table.add_row(*row)
    services = len(colours)
    parts: list[RenderableType] = [
        *head,
        Text(f"{len(spans)} spans, {services} services, {total / 1e6:.1f} ms"),
        table,
    ]
    if worst is not None:
        span, own = worst
        parts.append(
            Text(
                f"slowest: {span.name} ({span.service}) {own / 1e6:.1f} ms on its own, "
                f"{100 * own / total:.0f}% of {total / 1e6:.1f} ms",
                style="bold",
            )
        )
    return Group(*parts)


def _service_colours(spans: Sequence[SpanRecord]) -> dict[str, str]:
    services = dict.fromkeys(span.service for span in sorted(spans, key=lambda s: s.start_ns))
    return {
        service: _SERVICE_COLOURS[i % len(_SERVICE_COLOURS)] for i, service in enumerate(services)
    }


def _table(total: int, style: WaterfallStyle) -> Table:
    """Columns: start, duration, span (indented under its parent), service, the bar on
    the trace's time axis (its header: 0 ... total), notes."""
    end = f"{total / 1e6:.0f} ms"
    axis = "0" + end.rjust(style.bar_width - 1) if style.bar_width > len(end) + 1 else ""
    table = Table(box=box.MINIMAL, show_edge=False, pad_edge=False, header_style="bold")
    # Times and bars keep their width; on a narrow terminal the text columns give way
    # (their cells are cut with "…", never wrapped: see _cell).
    table.add_column("start ms", justify="right", no_wrap=True)
    table.add_column("dur ms", justify="right", no_wrap=True)
    table.add_column("span", max_width=style.name_width)
    table.add_column("service", max_width=style.service_width)
    table.add_column(axis, width=style.bar_width)
    if style.notes:
        table.add_column("notes")
    return table


def _cell(text: str = "", style: str = "") -> Text:
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _row(
    span: SpanRecord,
    depth: int,
    *,
    origin: int,
    total: int,
    style: WaterfallStyle,
    colours: dict[str, str],
    worst: bool,
) -> list[RenderableType]:
    colour = colours[span.service]
    row: list[RenderableType] = [
        f"{(span.start_ns - origin) / 1e6:.1f}",
        f"{span.duration_ns / 1e6:.1f}",
        _cell(("  " * depth) + span.name, "bold" if depth == 0 else ""),
        _cell(span.service, colour),
        _bar(span.start_ns - origin, span.duration_ns, total, style.bar_width, colour),
    ]
    if style.notes:
        row.append(_notes(span, worst=worst))
    elif worst:
        row.append(_cell(SLOWEST_MARK, "bold yellow"))
    return row


def _bar(offset: int, duration: int, total: int, width: int, colour: str) -> Bar:
    """The span's place on the time axis; at least one character, so none vanishes."""
    cell = total / width
    begin = min(float(offset), total - cell)
    end = min(float(total), max(float(offset + duration), begin + cell))
    return Bar(size=total, begin=begin, end=end, width=width, color=colour)


def _notes(span: SpanRecord, *, worst: bool) -> Text:
    notes = _cell()
    if worst:
        notes.append(SLOWEST_MARK + " ", style="bold yellow")
    parts = []
    for key, label in NOTE_ATTRIBUTES:
        if key in span.attributes:
            value = span.attributes[key]
            if isinstance(value, float):
                value = f"{value:g}"
            parts.append(f"{label}={value}")
    notes.append(" ".join(parts), style="dim")
    if span.failed:
        notes.append(f" ERROR {span.status_message}".rstrip(), style="bold red")
    notes.rstrip()
    return notes


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
