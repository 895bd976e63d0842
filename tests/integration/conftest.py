"""Integration fixtures: an in-memory span exporter behind the global tracer provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rewardbus.telemetry import MAX_LINKS


@pytest.fixture(scope="session")
def _recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider, installed on first use: OpenTelemetry lets a
    process set its global provider once, so this is the session's one."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_links=MAX_LINKS))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "another tracer provider was installed first"
    yield exporter
    provider.shutdown()


@pytest.fixture
def span_exporter(_recorded_spans: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """Spans finished during the test (components use the global API tracer)."""
    _recorded_spans.clear()
    yield _recorded_spans
    _recorded_spans.clear()
