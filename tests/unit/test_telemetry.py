"""Trace context crosses a process boundary even where no SDK is installed."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from rewardbus.telemetry import MAX_LINKS, configure_tracing
from schemas import extract_context, inject_context
from tests.support.otlp import OtlpReceiver


def test_no_exporter_installs_nothing_but_context_still_propagates() -> None:
    provider, shutdown = configure_tracing("t", env={}, set_global=False)
    shutdown()
    upstream = TracerProvider().get_tracer("producer")
    with upstream.start_as_current_span("publish") as span:
        headers = inject_context()
    # A worker without an SDK: the API's tracer makes non-recording spans...
    noop = trace.NoOpTracerProvider().get_tracer("worker")
    with noop.start_as_current_span("judge", context=extract_context(headers)):
        forwarded = inject_context()
    # ...which still carry the producer's trace to the next hop.
    downstream = trace.get_current_span(extract_context(forwarded)).get_span_context()
    assert downstream.trace_id == span.get_span_context().trace_id
    assert provider is not None


def test_an_endpoint_adds_an_exporter() -> None:
    with OtlpReceiver() as receiver:
        provider, shutdown = configure_tracing(
            "t", env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url}, set_global=False
        )
        with provider.get_tracer("t").start_as_current_span("s"):
            pass
        shutdown()  # flushes the span
    assert receiver.paths == ["/v1/traces"]


def test_a_span_keeps_up_to_max_links() -> None:
    # An aggregated batch's span links every sample's span: far more than the SDK's 128.
    provider, shutdown = configure_tracing("t", env={}, set_global=False)
    try:
        links = [
            trace.Link(trace.SpanContext(trace_id=1, span_id=i + 1, is_remote=True))
            for i in range(MAX_LINKS + 1)
        ]
        with provider.get_tracer("t").start_as_current_span("batch", links=links) as span:
            pass
        assert isinstance(span, ReadableSpan)
        assert len(span.links) == MAX_LINKS
    finally:
        shutdown()
