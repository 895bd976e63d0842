"""Reading what an OpenTelemetry meter counted, in a test."""

from __future__ import annotations

from collections import Counter

from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

__all__ = ["Points", "counter_points"]

# Metric name -> sorted (attribute, value) pairs -> summed value.
Points = dict[str, Counter[tuple[tuple[str, str], ...]]]


def counter_points(reader: InMemoryMetricReader) -> Points:
    """Counter values by metric name and sorted attribute pairs."""
    points: Points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    assert isinstance(point, NumberDataPoint)
                    key = tuple(sorted((k, str(v)) for k, v in (point.attributes or {}).items()))
                    points.setdefault(metric.name, Counter())[key] += int(point.value)
    return points
