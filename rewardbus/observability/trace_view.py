"""``rewardbus trace``: one sample's (or one batch's) trace, read back from Jaeger.

A sample's spans are found by their ``rewardbus.sample_id`` attribute and shown
as a waterfall: publish → queue wait → judge (parse, compile, a span per test) →
emit reward → aggregate. A batch is shown from its ``emit scored batch`` span,
which links to the aggregate span of every sample: each sample becomes one row
from its publish to its aggregation, so the sample that held the batch up stands
out, followed by the batch span itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from rewardbus.observability.jaeger_query import JaegerQuery, TraceNotFound
from rewardbus.observability.otlp import SpanRecord, build_forest, context_of, subtree_of
from rewardbus.observability.waterfall import (
    WaterfallStyle,
    render_waterfall,
    slowest,
    tree_json,
)

__all__ = [
    "BATCH_SPAN",
    "BatchTrace",
    "SampleTrace",
    "batch_trace",
    "render_batch",
    "render_sample",
    "sample_trace",
    "waiting_for_spans",
]

T = TypeVar("T")
_POLL_S = 0.25

SAMPLE_KEY = "rewardbus.sample_id"
BATCH_KEY = "rewardbus.batch_id"
BATCH_SPAN = "emit scored batch"


@dataclass(frozen=True, slots=True)
class SampleTrace:
    """The spans one sample owns (possibly from more than one trace, e.g. a re-publish)."""

    sample_id: str
    spans: tuple[SpanRecord, ...]
    # Spans above the sample's own (a trainer's step span), root first.
    context: tuple[SpanRecord, ...] = ()

    @property
    def trace_ids(self) -> list[str]:
        return sorted({span.trace_id for span in self.spans})

    @property
    def start_ns(self) -> int:
        return min(span.start_ns for span in self.spans)

    @property
    def end_ns(self) -> int:
        return max(span.end_ns for span in self.spans)

    def attribute(self, key: str) -> Any:
        """The first value of ``key`` on any of the sample's spans, in start order."""
        for span in sorted(self.spans, key=lambda s: s.start_ns):
            if key in span.attributes:
                return span.attributes[key]
        return None


@dataclass(frozen=True, slots=True)
class BatchTrace:
    """A scored batch's own spans and the traces of the samples it links to."""

    batch_id: str
    spans: tuple[SpanRecord, ...]
    samples: tuple[SampleTrace, ...]


def sample_trace(query: JaegerQuery, sample_id: str, *, lookback_s: float) -> SampleTrace:
    """Find and fetch one sample's spans; :class:`TraceNotFound` when Jaeger has none."""
    ids = query.find_trace_ids(SAMPLE_KEY, sample_id, lookback_s=lookback_s)
    spans: list[SpanRecord] = []
    context: list[SpanRecord] = []
    for trace_id in ids:
        whole = query.trace(trace_id)
        spans.extend(subtree_of(whole, SAMPLE_KEY, sample_id))
        context.extend(context_of(whole, SAMPLE_KEY, sample_id))
    if not spans:
        raise TraceNotFound(f"Jaeger has no spans of sample {sample_id}")
    return SampleTrace(sample_id, tuple(spans), tuple(context))


def batch_trace(query: JaegerQuery, batch_id: str, *, lookback_s: float) -> BatchTrace:
    """Fetch a batch's ``emit scored batch`` trace and every sample trace it links to."""
    ids = query.find_trace_ids(BATCH_KEY, batch_id, operation=BATCH_SPAN, lookback_s=lookback_s)
    own: list[SpanRecord] = []
    for trace_id in ids:
        spans = query.trace(trace_id)
        if any(s.name == BATCH_SPAN and s.attributes.get(BATCH_KEY) == batch_id for s in spans):
            own.extend(spans)
    if not own:
        raise TraceNotFound(f"Jaeger has no {BATCH_SPAN!r} span of batch {batch_id}")
    return BatchTrace(batch_id, tuple(own), tuple(_linked_samples(query, own)))


def _linked_samples(query: JaegerQuery, batch_spans: Sequence[SpanRecord]) -> list[SampleTrace]:
    fetched: dict[str, list[SpanRecord]] = {}
    samples: dict[str, SampleTrace] = {}
    for span in batch_spans:
        for link in span.links:
            if link.trace_id not in fetched:
                try:
                    fetched[link.trace_id] = query.trace(link.trace_id)
                except TraceNotFound:
                    fetched[link.trace_id] = []  # evicted from an in-memory Jaeger
            target = next((s for s in fetched[link.trace_id] if s.span_id == link.span_id), None)
            sample_id = str(target.attributes.get(SAMPLE_KEY, "")) if target else ""
            if sample_id and sample_id not in samples:
                spans = subtree_of(fetched[link.trace_id], SAMPLE_KEY, sample_id)
                samples[sample_id] = SampleTrace(sample_id, tuple(spans))
    return list(samples.values())


def waiting_for_spans(find: Callable[[], T], wait_s: float) -> T:
    """``find()``, tried again for up to ``wait_s`` while Jaeger has nothing yet.

    Exporters batch spans (the SDK flushes every few seconds and at exit), so a
    trace asked for right after its sample was scored may not be there yet.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return find()
        except TraceNotFound:
            if time.monotonic() >= deadline:
                raise
        time.sleep(_POLL_S)


def render_sample(trace: SampleTrace, *, as_json: bool, style: WaterfallStyle | None = None) -> str:
    """The waterfall (or the JSON span tree) of one sample."""
    if as_json:
        document = {
            "sample_id": trace.sample_id,
            "trace_ids": trace.trace_ids,
            "within": [{"name": s.name, "service": s.service} for s in trace.context],
            "spans": tree_json(trace.spans),
        }
        return json.dumps(document, indent=2, sort_keys=True)
    title = f"sample {trace.sample_id}  trace {', '.join(trace.trace_ids)}"
    if trace.context:
        title += "\nwithin: " + " > ".join(f"{s.name} ({s.service})" for s in trace.context)
    return render_waterfall(trace.spans, title=title, style=style)


def render_batch(trace: BatchTrace, *, as_json: bool, style: WaterfallStyle | None = None) -> str:
    """Each linked sample as one row (publish to aggregation), then the batch's spans."""
    if as_json:
        return json.dumps(_batch_json(trace), indent=2, sort_keys=True)
    rows = [_sample_row(sample) for sample in trace.samples]
    rows.extend(trace.spans)
    title = (
        f"batch {trace.batch_id}: {len(trace.samples)} linked samples, "
        f"trace {', '.join(sorted({s.trace_id for s in trace.spans}))}"
    )
    style = style or WaterfallStyle()
    longest = max((len(row.name) for row in rows), default=0)
    # Sample ids are the names here: show them whole (up to a point).
    style = replace(style, name_width=min(64, max(style.name_width, longest + 1)))
    return render_waterfall(rows, title=title, style=style)


# A failing test or compile is the program's outcome, already in the verdict; an
# error anywhere else (a dead letter, a sandbox fault, a refused publish) is not.
_PROGRAM_SPANS = frozenset({"test", "tests", "compile", "parse", "static check"})


def _sample_row(sample: SampleTrace) -> SpanRecord:
    """A sample, end to end, as one span-like row: verdict and score from its spans,
    the worker that judged it in the service column."""
    attributes = {
        key: value
        for key in ("rewardbus.verdict", "rewardbus.score", "rewardbus.cache_hit")
        if (value := sample.attribute(key)) is not None
    }
    return SpanRecord(
        trace_id=sample.trace_ids[0],
        span_id=f"sample:{sample.sample_id}",
        parent_id="",
        name=sample.sample_id,
        service=str(sample.attribute("rewardbus.worker_id") or "(sample)"),
        kind="internal",
        start_ns=sample.start_ns,
        end_ns=sample.end_ns,
        attributes=attributes,
        status="error"
        if any(s.failed and s.name not in _PROGRAM_SPANS for s in sample.spans)
        else "unset",
    )


def _batch_json(trace: BatchTrace) -> dict[str, Any]:
    origin = min([s.start_ns for s in trace.spans] + [sample.start_ns for sample in trace.samples])
    samples = []
    for sample in trace.samples:
        worst = slowest(build_forest(sample.spans))
        samples.append(
            {
                "sample_id": sample.sample_id,
                "trace_ids": sample.trace_ids,
                "start_offset_ms": round((sample.start_ns - origin) / 1e6, 3),
                "duration_ms": round((sample.end_ns - sample.start_ns) / 1e6, 3),
                "slowest_span": None if worst is None else _slowest_json(*worst),
                "spans": tree_json(sample.spans),
            }
        )
    return {"batch_id": trace.batch_id, "spans": tree_json(trace.spans), "samples": samples}


def _slowest_json(span: SpanRecord, own_ns: int) -> dict[str, Any]:
    return {"name": span.name, "service": span.service, "self_ms": round(own_ns / 1e6, 3)}
