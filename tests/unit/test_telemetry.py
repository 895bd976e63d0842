"""Trace context crosses a process boundary even where no SDK is installed."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from rewardbus.telemetry import configure_tracing
from schemas import extract_context, inject_context


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
    provider, shutdown = configure_tracing(
        "t", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, set_global=False
    )
    try:
        processors = provider._active_span_processor._span_processors
        assert len(processors) == 1
        assert provider._span_limits.max_links == 8192
    finally:
        shutdown()
