"""Spans out of OTLP JSON (what Jaeger's ``/api/v3/traces`` returns), as plain values.

No I/O: a document in, :class:`SpanRecord` values and :class:`SpanNode` trees
out, so the rendering and the tests read spans without knowing the wire shape.
OTLP JSON writes 64-bit integers as strings and, depending on the encoder, ids
as hex or base64 and enums as names or numbers; all of those are accepted.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AttributeValue",
    "SpanLink",
    "SpanNode",
    "SpanRecord",
    "build_forest",
    "context_of",
    "spans_from_otlp",
    "subtree_of",
]

AttributeValue = str | int | float | bool | tuple[Any, ...]

_KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
_STATUS = ("unset", "ok", "error")


@dataclass(frozen=True, slots=True)
class SpanLink:
    """A link from one span to another (the scored batch's span links to each sample)."""

    trace_id: str
    span_id: str


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span, with its service and times in nanoseconds since the epoch."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    status: str = "unset"
    status_message: str = ""
    links: tuple[SpanLink, ...] = ()

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def failed(self) -> bool:
        return self.status == "error"


@dataclass(frozen=True, slots=True)
class SpanNode:
    """A span and its children, ordered by start time."""

    span: SpanRecord
    children: tuple[SpanNode, ...] = ()

    def walk(self, depth: int = 0) -> Iterable[tuple[int, SpanNode]]:
        """Depth-first, parents before children: (depth, node)."""
        yield depth, self
        for child in self.children:
            yield from child.walk(depth + 1)


def spans_from_otlp(document: Mapping[str, Any]) -> list[SpanRecord]:
    """Every span of an OTLP JSON document (``{"result": {"resourceSpans": ...}}`` or bare)."""
    body = document.get("result", document)
    spans: list[SpanRecord] = []
    for resource_spans in body.get("resourceSpans") or []:
        resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
        service = str(resource.get("service.name", "unknown"))
        for scope_spans in resource_spans.get("scopeSpans") or []:
            spans.extend(_span(raw, service) for raw in scope_spans.get("spans") or [])
    return spans


def build_forest(spans: Iterable[SpanRecord]) -> list[SpanNode]:
    """Trees of ``spans``: a span whose parent is not among them is a root."""
    by_id = {span.span_id: span for span in spans}
    children: dict[str, list[SpanRecord]] = {}
    roots: list[SpanRecord] = []
    for span in by_id.values():
        if span.parent_id and span.parent_id in by_id:
            children.setdefault(span.parent_id, []).append(span)
        else:
            roots.append(span)

    def node(span: SpanRecord) -> SpanNode:
        kids = sorted(children.get(span.span_id, []), key=_order)
        return SpanNode(span, tuple(node(kid) for kid in kids))

    return [node(root) for root in sorted(roots, key=_order)]


def subtree_of(spans: Sequence[SpanRecord], key: str, value: str) -> list[SpanRecord]:
    """The spans of one sample (or batch) inside a trace that may hold more.

    A trainer's step span can parent many samples' publish spans, so a trace is
    not always one sample's. Kept: the topmost spans whose attribute ``key`` is
    ``value`` and everything below them.
    """
    keep = {span.span_id for span in _tops(spans, key, value)}
    grew = bool(keep)
    while grew:
        grew = False
        for span in spans:
            if span.span_id not in keep and span.parent_id in keep:
                keep.add(span.span_id)
                grew = True
    return [span for span in spans if span.span_id in keep]


def context_of(spans: Sequence[SpanRecord], key: str, value: str) -> list[SpanRecord]:
    """The ancestors of :func:`subtree_of`'s spans (e.g. the trainer's step), root first."""
    by_id = {span.span_id: span for span in spans}
    chain: list[SpanRecord] = []
    for top in _tops(spans, key, value):
        parent = by_id.get(top.parent_id)
        while parent is not None and parent not in chain:
            chain.append(parent)
            parent = by_id.get(parent.parent_id)
    return sorted(chain, key=_order)


def _tops(spans: Sequence[SpanRecord], key: str, value: str) -> list[SpanRecord]:
    by_id = {span.span_id: span for span in spans}
    matching = {span.span_id for span in spans if str(span.attributes.get(key, "")) == value}
    return [
        span
        for span in spans
        if span.span_id in matching and not _has_ancestor_in(span, matching, by_id)
    ]


def _has_ancestor_in(span: SpanRecord, ids: set[str], by_id: Mapping[str, SpanRecord]) -> bool:
    parent = by_id.get(span.parent_id)
    seen: set[str] = set()
    while parent is not None and parent.span_id not in seen:
        if parent.span_id in ids:
            return True
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_id)
    return False


def _order(span: SpanRecord) -> tuple[int, str]:
    return span.start_ns, span.name


def _span(raw: Mapping[str, Any], service: str) -> SpanRecord:
    status = raw.get("status") or {}
    return SpanRecord(
        trace_id=_id(raw.get("traceId")),
        span_id=_id(raw.get("spanId")),
        parent_id=_id(raw.get("parentSpanId")),
        name=str(raw.get("name", "")),
        service=service,
        kind=_enum(raw.get("kind"), _KINDS, "SPAN_KIND_"),
        start_ns=int(raw.get("startTimeUnixNano") or 0),
        end_ns=int(raw.get("endTimeUnixNano") or 0),
        attributes=_attributes(raw.get("attributes")),
        status=_enum(status.get("code"), _STATUS, "STATUS_CODE_"),
        status_message=str(status.get("message", "")),
        links=tuple(
            SpanLink(_id(link.get("traceId")), _id(link.get("spanId")))
            for link in raw.get("links") or []
        ),
    )


def _id(value: Any) -> str:
    """A trace or span id as lower-case hex ("" when absent)."""
    if not value:
        return ""
    text = str(value)
    if len(text) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in text):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except (binascii.Error, ValueError):
        return text


def _enum(value: Any, names: Sequence[str], prefix: str) -> str:
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else str(value)
    if value is None or value == "":
        return names[0]
    return str(value).removeprefix(prefix).lower()


def _attributes(raw: Iterable[Mapping[str, Any]] | None) -> dict[str, AttributeValue]:
    return {str(item["key"]): _value(item.get("value") or {}) for item in raw or []}


def _value(value: Mapping[str, Any]) -> AttributeValue:
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return tuple(_value(v) for v in (value["arrayValue"] or {}).get("values") or [])
    return ""
