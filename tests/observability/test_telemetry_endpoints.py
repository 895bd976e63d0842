"""Which OTLP variables send what: Jaeger takes spans only, so a traces-only endpoint
must not also get the metrics (it answers them with 404s, logged on every export)."""

from __future__ import annotations

from rewardbus.telemetry import configure_telemetry
from tests.support.otlp import OtlpReceiver


def _exports(env: dict[str, str]) -> set[str]:
    """The OTLP paths a service configured by ``env`` posts a span and a count to
    (``{url}`` in a value stands for a local receiver's address)."""
    with OtlpReceiver() as receiver:
        env = {name: value.replace("{url}", receiver.url) for name, value in env.items()}
        done = configure_telemetry("t", env=env, set_global=False)
        with done.tracer_provider.get_tracer("t").start_as_current_span("s"):
            pass
        if done.meter_provider is not None:
            done.meter_provider.get_meter("t").create_counter("c").add(1)
        done.shutdown()  # flushes both
    return set(receiver.paths)


def test_traces_endpoint_sends_spans_only() -> None:
    assert _exports({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "{url}/v1/traces"}) == {"/v1/traces"}


def test_generic_endpoint_sends_both() -> None:
    assert _exports({"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}"}) == {"/v1/traces", "/v1/metrics"}


def test_metrics_endpoint_alone_and_metrics_off() -> None:
    metrics_only = {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "{url}/v1/metrics"}
    assert _exports(metrics_only) == {"/v1/metrics"}
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}", "OTEL_METRICS_EXPORTER": "none"}
    assert _exports(env) == {"/v1/traces"}
