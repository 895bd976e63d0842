"""OpenTelemetry SDK set-up: the only place the SDK is configured.

Components use the OpenTelemetry API alone; the application shell decides where
spans and metrics go. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or an explicit endpoint)
spans and metrics are exported over OTLP/HTTP, e.g. to a collector;
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` sends spans alone (what Jaeger takes). With a
:class:`MetricsEndpoint` the metrics are also served for Prometheus to scrape
(``/metrics``, text exposition format; docs/metrics.md lists them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = ["MAX_LINKS", "MetricsEndpoint", "Telemetry", "configure_telemetry", "configure_tracing"]

# A scored-batch span links to every sample span of its batch; the SDK's default
# of 128 links would silently drop the rest of a large batch.
MAX_LINKS = 8192


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """Where ``/metrics`` is served. Loopback by default: metrics name problems and
    workers, and nothing should listen on every interface unless asked to."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (the bound one is in Telemetry.metrics_url)


@dataclass(frozen=True)
class Telemetry:
    """What :func:`configure_telemetry` set up, and how to stop it."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider | None
    metrics_url: str | None  # http://host:port/metrics when an endpoint is served
    shutdown: Callable[[], None]


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
    done = configure_telemetry(service_name, env=env, processors=processors, set_global=set_global)
    return done.tracer_provider, done.shutdown


def configure_telemetry(
    service_name: str,
    *,
    env: Mapping[str, str],
    processors: list[SpanProcessor] | None = None,
    metrics_endpoint: MetricsEndpoint | None = None,
    set_global: bool = True,
) -> Telemetry:
    """Tracing as :func:`configure_tracing`, plus metrics: over OTLP next to the spans
    when an endpoint is set, and served on ``metrics_endpoint`` when one is given."""
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
    meters, server = _configure_metrics(
        service_name, _otlp_metrics_endpoint(env), metrics_endpoint, set_global=set_global
    )

    def shutdown() -> None:
        provider.shutdown()
        if server is not None:
            server.shutdown()
            server.server_close()
        if meters is not None:
            meters.shutdown()

    url = None if server is None else f"http://{_url_host(server)}:{server.server_port}/metrics"
    return Telemetry(provider, meters, url, shutdown)


def _configure_metrics(
    service_name: str,
    endpoint: str | None,
    served: MetricsEndpoint | None,
    *,
    set_global: bool,
) -> tuple[MeterProvider | None, WSGIServer | None]:
    """Metrics go over OTLP next to the traces and/or to a scrape endpoint; with
    neither they stay in the API's no-op meters (nothing is aggregated)."""
    readers: list[MetricReader] = []
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        url = endpoint if endpoint.endswith("/v1/metrics") else endpoint.rstrip("/") + "/v1/metrics"
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=url)))
    server = None
    if served is not None:
        reader, server = _prometheus_reader(served)
        readers.append(reader)
    if not readers:
        return None, None
    provider = MeterProvider(
        resource=Resource.create({"service.name": service_name}), metric_readers=readers
    )
    if set_global:
        metrics.set_meter_provider(provider)
    return provider, server


def _otlp_metrics_endpoint(env: Mapping[str, str]) -> str | None:
    """Where metrics go over OTLP: the metrics or the generic endpoint, never the
    traces-only one (Jaeger takes traces and answers 404 to metrics)."""
    if env.get("OTEL_METRICS_EXPORTER") == "none":
        return None
    return env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")


def _prometheus_reader(served: MetricsEndpoint) -> tuple[MetricReader, WSGIServer]:
    """A pull reader on its own registry (not prometheus_client's process-wide one, so
    two providers in one process never collide) and the HTTP server that exposes it.

    Recording a measurement only updates the SDK's aggregate; the exposition text is
    built on each scrape, in the server's thread, so its cost is per scrape.
    """
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    reader = PrometheusMetricReader(
        # Series carry their own labels (worker_id, language, ...); the scope labels
        # would add four constant labels to every series and nothing to a query.
        scope_info_enabled=False,
        # service.name as a label: a dashboard can split workers from aggregators
        # even when one scrape job covers both.
        resource_attribute_filter=lambda key: key == "service.name",
        registry=registry,
    )
    server, _thread = start_http_server(served.port, addr=served.host, registry=registry)
    return reader, server


def _url_host(server: WSGIServer) -> str:
    host = str(server.server_address[0])
    return f"[{host}]" if ":" in host else host
