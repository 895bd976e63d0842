"""Reading traces back from Jaeger's query service over HTTP (standard library only).

Two of Jaeger's APIs are used, each for what it does well:

- ``/api/v3/traces/{trace_id}`` returns a whole trace as OTLP JSON (with links),
  parsed by :mod:`rewardbus.observability.otlp`; ``/api/v3/services`` lists services.
- The v3 HTTP search ignores span attributes, so a trace is *found* by attribute
  through the query service's search API (``/api/traces?service=&tags={...}``),
  which filters by span tag inside Jaeger: only the matching trace ids travel.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rewardbus.errors import CommandFailed, Unavailable
from rewardbus.observability.otlp import SpanRecord, spans_from_otlp

__all__ = ["DEFAULT_QUERY_URL", "JaegerQuery", "JaegerQueryError", "TraceNotFound"]

DEFAULT_QUERY_URL = "http://127.0.0.1:16686"


class JaegerQueryError(Unavailable):
    """Jaeger's query service could not be reached or answered with an error."""


class TraceNotFound(CommandFailed):
    """No trace matched (yet: spans reach Jaeger a moment after they end).

    Jaeger answered: not a :class:`JaegerQueryError` (an unavailable service) but a
    search that found nothing.
    """


@dataclass(frozen=True, slots=True)
class JaegerQuery:
    """A client of one Jaeger query service (``base_url`` as the UI's address)."""

    base_url: str = DEFAULT_QUERY_URL
    timeout_s: float = 10.0

    def services(self) -> list[str]:
        """The services Jaeger has spans of."""
        body = self._get("/api/v3/services")
        return sorted(str(name) for name in body.get("services") or [])

    def trace(self, trace_id: str) -> list[SpanRecord]:
        """Every span of one trace."""
        try:
            body = self._get(f"/api/v3/traces/{urllib.parse.quote(trace_id)}")
        except TraceNotFound:
            raise TraceNotFound(f"no trace {trace_id}") from None
        return spans_from_otlp(body)

    def find_trace_ids(
        self,
        key: str,
        value: str,
        *,
        services: Iterable[str] | None = None,
        operation: str | None = None,
        lookback_s: float = 86_400.0,
        limit: int = 20,
    ) -> list[str]:
        """Ids of the traces with a span whose attribute ``key`` equals ``value``.

        The search API needs a service; all of Jaeger's are tried unless given.
        ``operation`` keeps only traces with a span of that name.
        """
        now_us = int(time.time() * 1e6)
        found: list[str] = []
        for service in services if services is not None else self.services():
            params = {
                "service": service,
                "tags": json.dumps({key: value}),  # any value, colons included
                "start": str(now_us - int(lookback_s * 1e6)),
                "end": str(now_us + 60_000_000),  # a little clock skew between hosts
                "limit": str(limit),
            }
            if operation is not None:
                params["operation"] = operation
            try:
                body = self._get("/api/traces?" + urllib.parse.urlencode(params))
            except TraceNotFound:
                continue
            for entry in body.get("data") or []:
                trace_id = str(entry.get("traceID", ""))
                if trace_id and trace_id not in found:
                    found.append(trace_id)
        return found

    def _get(self, path: str) -> dict[str, Any]:
        url = self.base_url.rstrip("/") + path
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 -- http(s) URL given by the user
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:  # noqa: S310
                data = reply.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise TraceNotFound(f"{url}: not found") from None
            raise JaegerQueryError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JaegerQueryError(f"cannot reach Jaeger at {self.base_url}: {reason}") from None
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise JaegerQueryError(f"{url}: not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise JaegerQueryError(f"{url}: unexpected answer {str(body)[:200]}")
        return body
