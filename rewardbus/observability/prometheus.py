"""A local Prometheus on 127.0.0.1 that scrapes the workers and aggregators, started by us.

The binary comes from :func:`rewardbus.observability.gotools.ensure` (Prometheus 3.x,
built once from the Go module proxy into the cache). Its configuration is generated:
one scrape job, ``rewardbus``, over the ``/metrics`` endpoints given as targets
(``rewardbus worker --metrics-port``, ``rewardbus aggregator --metrics-port``), a
short scrape interval (a local run lasts minutes, not months), and optionally the
alert rules of ``infra/prometheus/``. Its data lives in a temporary directory that
is removed when it stops.

:class:`PrometheusProcess` runs it as a child: ``start()`` returns once ``/-/ready``
answers 200; ``stop()`` sends SIGTERM (Prometheus shuts its TSDB down cleanly) and
SIGKILLs only after a grace period. :func:`query` runs an instant PromQL query over
its HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rewardbus.errors import Unavailable
from rewardbus.observability.gotools import PROMETHEUS, ensure
from rewardbus.runtime.child import ChildProcess, log_tail
from rewardbus.runtime.reaped_child import ReapedChild

__all__ = [
    "PrometheusConfig",
    "PrometheusError",
    "PrometheusProcess",
    "Sample",
    "query",
    "scrape_config",
    "serve",
]

_READY_POLL_S = 0.1
_PORT_RETRIES = 3


class PrometheusError(Unavailable):
    """Prometheus could not be started, exited on its own, or refused a query."""


@dataclass(frozen=True, slots=True)
class PrometheusConfig:
    """Where a local Prometheus listens, what it scrapes and how often.

    ``targets`` are ``host:port`` of ``/metrics`` endpoints. A port of 0 means
    "pick a free one" (tests); 9090 is Prometheus's own default.
    """

    host: str = "127.0.0.1"
    port: int = 9090
    targets: tuple[str, ...] = ()
    scrape_interval_s: float = 2.0
    rule_files: tuple[Path, ...] = ()
    retention: str = "1d"
    start_timeout_s: float = 60.0
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scrape_interval_s <= 0:
            raise ValueError("the scrape interval must be positive")
        for target in self.targets:
            host, _, port = target.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"target {target!r} is not host:port")

    @property
    def url(self) -> str:
        """Base URL of its HTTP API and UI."""
        return f"http://{self.host}:{self.port}"


def _duration(seconds: float) -> str:
    """A Prometheus duration (milliseconds are its finest unit)."""
    return f"{max(1, round(seconds * 1000))}ms"


def scrape_config(config: PrometheusConfig) -> dict[str, Any]:
    """The ``prometheus.yml`` document for ``config`` (written as JSON, which is YAML)."""
    interval = _duration(config.scrape_interval_s)
    # A scrape may not outlast its interval; past 10 s (Prometheus's default) it is stuck.
    timeout = _duration(min(config.scrape_interval_s, 10.0))
    document: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": "rewardbus",
                "scrape_timeout": timeout,
                "static_configs": [
                    {"targets": list(config.targets), "labels": dict(config.extra_labels)}
                ],
            }
        ],
    }
    if config.rule_files:
        document["rule_files"] = [str(path.resolve()) for path in config.rule_files]
    return document


class PrometheusProcess(ChildProcess):
    """One Prometheus child process; a sync and async context manager.

    ``binary`` defaults to the cached build (built first if missing, which takes
    minutes once). A port of 0 is picked free at start; the chosen one is in
    :attr:`config` afterwards.
    """

    def __init__(
        self,
        config: PrometheusConfig,
        *,
        binary: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._requested = config
        self._config = config
        self._binary = binary
        self._env = dict(env if env is not None else os.environ)
        super().__init__()

    @property
    def config(self) -> PrometheusConfig:
        """The configuration in use (with the port actually chosen once started)."""
        return self._config

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start Prometheus and wait until ``/-/ready`` answers."""
        if self._workdir is not None:
            raise PrometheusError("Prometheus is already started")
        if self._binary is None:
            self._binary = ensure(PROMETHEUS, self._env)
        self._workdir = tempfile.TemporaryDirectory(prefix="rewardbus-prometheus-")
        try:
            for attempt in range(1, _PORT_RETRIES + 1):
                self._spawn()
                try:
                    self._wait_ready()
                except PrometheusError:
                    # A port picked free may have been taken before Prometheus bound it.
                    retry = self._requested.port == 0 and attempt < _PORT_RETRIES
                    if not (retry and "address already in use" in self.log_tail()):
                        raise
                    self._reap()
                    continue
                return
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> None:
        assert self._workdir is not None and self._binary is not None
        port = self._requested.port or _free_port(self._requested.host)
        self._config = replace(self._requested, port=port)
        work = Path(self._workdir.name)
        config_file = work / "prometheus.yml"
        config_file.write_text(json.dumps(scrape_config(self._config), indent=2))
        if self._log is not None:
            self._log.close()
        self._log = (work / "prometheus.log").open("wb")
        argv = [
            str(self._binary),
            f"--config.file={config_file}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--storage.tsdb.retention.time={self._config.retention}",
            f"--web.listen-address={self._config.host}:{port}",
            "--log.level=warn",
        ]
        # SIGTERM if we die: Prometheus closes its TSDB and exits instead of lingering.
        self._proc = ReapedChild(
            argv,
            cwd=work,
            log=self._log,
            env=self._env,
            death_signal=signal.SIGTERM,
            name="prometheus-child",
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._config.start_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.exited.is_set():
                raise PrometheusError(
                    f"Prometheus exited with status {self._proc.returncode} during start-up: "
                    f"{self.log_tail()}"
                )
            if self.ready():
                return
            time.sleep(_READY_POLL_S)
        raise PrometheusError(
            f"Prometheus not ready after {self._config.start_timeout_s:.0f} s: {self.log_tail()}"
        )

    def ready(self) -> bool:
        """True when ``/-/ready`` answers 200 (the TSDB is open, scraping has begun)."""
        try:
            with urllib.request.urlopen(f"{self._config.url}/-/ready", timeout=2) as reply:  # noqa: S310 -- our own http URL
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self) -> str:
        """The end of Prometheus's log (start-up errors name the setting that failed)."""
        return log_tail(Path(self._workdir.name) / "prometheus.log" if self._workdir else None)


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant-query result: its labels and value."""

    labels: Mapping[str, str]
    value: float


def query(
    base_url: str, promql: str, *, at: float | None = None, timeout_s: float = 10.0
) -> list[Sample]:
    """Run an instant PromQL query (``/api/v1/query``, at ``at`` seconds since the
    epoch, default now); a vector or scalar result."""
    params = {"query": promql} | ({} if at is None else {"time": f"{at:.3f}"})
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 -- caller's http URL
            body = json.load(reply)
    except urllib.error.HTTPError as exc:  # 400/422: the query itself is wrong
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise PrometheusError(f"query {promql!r} refused ({exc.code}): {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise PrometheusError(f"no Prometheus at {base_url}: {exc}") from None
    data = body.get("data", {})
    if data.get("resultType") == "scalar":
        return [Sample({}, float(data["result"][1]))]
    return [Sample(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]


async def serve(
    config: PrometheusConfig,
    *,
    env: Mapping[str, str],
    shutdown: Awaitable[object],
    on_ready: Callable[[PrometheusConfig], None] | None = None,
) -> None:
    """Run Prometheus until ``shutdown`` completes, then stop it (``rewardbus prometheus``).

    Raises :class:`PrometheusError` if it cannot start or exits on its own.
    """
    stop = asyncio.ensure_future(shutdown)
    try:
        async with PrometheusProcess(config, env=env) as prometheus:
            if on_ready is not None:
                on_ready(prometheus.config)
            exited = asyncio.ensure_future(asyncio.to_thread(prometheus.wait))
            await asyncio.wait([stop, exited], return_when=asyncio.FIRST_COMPLETED)
            if not stop.done():
                raise PrometheusError(
                    f"Prometheus exited on its own with status {exited.result()}: "
                    f"{prometheus.log_tail()}"
                )
    finally:
        stop.cancel()


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
