"""OpenTelemetry SDK set-up: the only place the SDK is configured.

Components use the OpenTelemetry API alone; the application shell decides where
spans go. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or an explicit endpoint) spans are
exported over OTLP/HTTP, e.g. to Jaeger.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["MAX_LINKS", "configure_tracing"]

# A scored-batch span links to every sample span of its batch; the SDK's default
# of 128 links would silently drop the rest of a large batch.
MAX_LINKS = 8192


def configure_tracing(
    service_name: str,
    *,
    env: Mapping[str, str],
    processors: list[SpanProcessor] | None = None,
    set_global: bool = True,
) -> tuple[TracerProvider, Callable[[], None]]:
    """Build a tracer provider; return it and a shutdown function that flushes spans.

    ``env`` is passed in (not read here) so that only the CLI touches the
    environment. With no exporter and no processor the provider is not installed
    globally: spans nobody collects would cost CPU on every record, and trace
    context still propagates through the API's non-recording spans.
    """
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name}),
        span_limits=SpanLimits(max_links=MAX_LINKS),
    )
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        traces_url = (
            endpoint if endpoint.endswith("/v1/traces") else endpoint.rstrip("/") + "/v1/traces"
        )
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
    for processor in processors or []:
        provider.add_span_processor(processor)
    if set_global and (endpoint or processors):
        trace.set_tracer_provider(provider)
    meters = _configure_metrics(service_name, endpoint, set_global=set_global)

    def shutdown() -> None:
        provider.shutdown()
        if meters is not None:
            meters.shutdown()

    return provider, shutdown


def _configure_metrics(
    service_name: str, endpoint: str | None, *, set_global: bool
) -> MeterProvider | None:
    """Metrics go over OTLP next to the traces; without an endpoint they stay in-process."""
    if not endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    url = endpoint.rstrip("/")
    url = url.removesuffix("/v1/traces") + "/v1/metrics"
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=url))
    provider = MeterProvider(
        resource=Resource.create({"service.name": service_name}), metric_readers=[reader]
    )
    if set_global:
        metrics.set_meter_provider(provider)
    return provider
