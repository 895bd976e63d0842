"""Integration fixtures: an in-memory span exporter behind the global tracer provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter = InMemorySpanExporter()
_provider = TracerProvider(span_limits=SpanLimits(max_links=8192))
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """Spans finished during the test (components use the global API tracer)."""
    _exporter.clear()
    yield _exporter
    _exporter.clear()
