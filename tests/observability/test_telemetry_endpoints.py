"""Which OTLP variables send what: Jaeger takes spans only, so a traces-only endpoint
must not also get the metrics (it answers them with 404s, logged on every export)."""

from __future__ import annotations

from rewardbus.telemetry import configure_telemetry


def _exports(env: dict[str, str]) -> tuple[int, bool]:
    """(span processors, whether a meter provider was made)."""
    done = configure_telemetry("t", env=env, set_global=False)
    try:
        processors = done.tracer_provider._active_span_processor._span_processors
        return len(processors), done.meter_provider is not None
    finally:
        done.shutdown()


def test_traces_endpoint_sends_spans_only() -> None:
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
    assert _exports(env) == (1, False)


def test_generic_endpoint_sends_both() -> None:
    assert _exports({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}) == (1, True)


def test_metrics_endpoint_alone_and_metrics_off() -> None:
    assert _exports({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:9/v1/metrics"}) == (
        0,
        True,
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_METRICS_EXPORTER": "none"}
    assert _exports(env) == (1, False)
