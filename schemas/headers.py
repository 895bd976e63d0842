"""Kafka record header conventions: W3C trace context and content type."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry import propagate
from opentelemetry.context import Context

__all__ = ["CONTENT_TYPE", "Headers", "extract_context", "header", "inject_context"]

Headers = list[tuple[str, bytes]]

CONTENT_TYPE = ("content-type", b"application/msgpack")


def inject_context(headers: Headers | None = None, context: Context | None = None) -> Headers:
    """Return ``headers`` plus ``traceparent``/``tracestate`` for the current span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    out = list(headers or [])
    out.extend((key, value.encode()) for key, value in carrier.items())
    return out


def extract_context(headers: Iterable[tuple[str, bytes]] | None) -> Context:
    """The trace context carried by a record's headers (empty when there is none)."""
    carrier: dict[str, str] = {}
    for key, value in headers or ():
        if value is not None:
            carrier[key] = bytes(value).decode("latin-1")
    return propagate.extract(carrier)


def header(headers: Sequence[tuple[str, bytes]] | None, name: str) -> bytes | None:
    """The value of header ``name``, or None."""
    for key, value in headers or ():
        if key == name:
            return value
    return None
