"""Span helpers: the OpenTelemetry API only (the application configures the SDK)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["link_to", "traceparent_of"]

# W3C explicitly, whatever the global propagator: the value is stored in our own
# state and read back by our own code.
_W3C = TraceContextTextMapPropagator()


def traceparent_of(span: Span) -> str:
    """The W3C traceparent of ``span`` ("" when it is not sampled or not recorded)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def link_to(traceparent: str) -> Link | None:
    """A span link to the span a stored traceparent names (None if it is not valid)."""
    context = trace.get_current_span(_W3C.extract({"traceparent": traceparent})).get_span_context()
    return Link(context) if _valid(context) else None


def _valid(context: SpanContext) -> bool:
    return context.is_valid
