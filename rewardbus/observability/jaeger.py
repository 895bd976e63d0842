"""A local Jaeger v2: in-memory storage, every port on 127.0.0.1, started and stopped by us.

Jaeger v2 is an OpenTelemetry Collector distribution configured by one YAML
document (``--config``). Ours keeps only what a local trace store needs: the
OTLP receiver (gRPC and HTTP), the in-memory store and the query service (API
and placeholder UI). Every listener is named explicitly, so nothing binds to
all interfaces, nothing falls back to a fixed default port (the collector's own
metrics on 8888, the query gRPC on 16685), and tests can run on free ports next
to a Jaeger someone already has on the defaults.

The binary comes from :func:`rewardbus.observability.gotools.ensure` (built once
into the cache). :class:`JaegerProcess` runs it as a child: ``start()`` returns
once the query API answers and both OTLP ports accept connections; ``stop()``
sends SIGTERM (Jaeger flushes and exits) and SIGKILLs only after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rewardbus.errors import Unavailable
from rewardbus.observability.gotools import JAEGER, ensure
from rewardbus.runtime.child import ChildProcess, log_tail
from rewardbus.runtime.ports import free_ports
from rewardbus.runtime.reaped_child import ReapedChild

__all__ = [
    "JaegerConfig",
    "JaegerError",
    "JaegerProcess",
    "answers",
    "collector_config",
    "ensure_running",
    "serve",
]

_READY_POLL_S = 0.1
_LOG_TAIL_BYTES = 3000
_PORT_RETRIES = 3


class JaegerError(Unavailable):
    """Jaeger could not be started, or it exited on its own."""


@dataclass(frozen=True, slots=True)
class JaegerConfig:
    """Where a local Jaeger listens and how much it keeps.

    The defaults are Jaeger's own ports, so clients configured for a stock Jaeger
    (``OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318``, the UI on 16686) work
    unchanged; a port of 0 means "pick a free one" (tests).
    """

    host: str = "127.0.0.1"
    otlp_grpc_port: int = 4317
    otlp_http_port: int = 4318
    query_port: int = 16686
    query_grpc_port: int = 16685
    max_traces: int = 100_000
    log_level: str = "warn"
    start_timeout_s: float = 60.0

    @property
    def ports(self) -> tuple[int, int, int, int]:
        return (self.otlp_grpc_port, self.otlp_http_port, self.query_port, self.query_grpc_port)

    @property
    def query_url(self) -> str:
        """Base URL of the query service (API and UI)."""
        return f"http://{self.host}:{self.query_port}"

    @property
    def otlp_http_endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` should be for the OTLP/HTTP exporter."""
        return f"http://{self.host}:{self.otlp_http_port}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"{self.host}:{self.otlp_grpc_port}"

    def with_free_ports(self) -> JaegerConfig:
        """This config with every port of 0 replaced by a currently free one."""
        wanted = [name for name in _PORT_FIELDS if getattr(self, name) == 0]
        picked: dict[str, Any] = dict(zip(wanted, free_ports(self.host, len(wanted)), strict=True))
        return replace(self, **picked)


_PORT_FIELDS = ("otlp_grpc_port", "otlp_http_port", "query_port", "query_grpc_port")


def collector_config(config: JaegerConfig) -> dict[str, Any]:
    """The Jaeger v2 (collector) configuration document for ``config``.

    Ports must be concrete (see :meth:`JaegerConfig.with_free_ports`).
    """
    host = config.host
    store = "memstore"
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                # "none" also keeps the collector from serving its metrics on :8888.
                "metrics": {"level": "none"},
                "logs": {"level": config.log_level},
            },
        },
        "extensions": {
            "jaeger_storage": {"backends": {store: {"memory": {"max_traces": config.max_traces}}}},
            "jaeger_query": {
                "storage": {"traces": store},
                # Jaeger v2 traces its own queries by default; they would fill the store
                # and the service list with "jaeger" next to rewardbus's services.
                "enable_tracing": False,
                "http": {"endpoint": f"{host}:{config.query_port}"},
                "grpc": {"endpoint": f"{host}:{config.query_grpc_port}"},
            },
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"{host}:{config.otlp_grpc_port}"},
                    "http": {"endpoint": f"{host}:{config.otlp_http_port}"},
                }
            }
        },
        "processors": {"batch": {}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": store}},
    }


class JaegerProcess(ChildProcess):
    """One Jaeger child process; a sync and async context manager.

    ``binary`` defaults to the cached build (built first if missing, which takes
    minutes once). Ports of 0 in ``config`` are picked free at start; the chosen
    ones are in :attr:`config` afterwards.
    """

    def __init__(
        self,
        config: JaegerConfig | None = None,
        *,
        binary: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._requested = config or JaegerConfig()
        self._config = self._requested
        self._binary = binary
        self._env = dict(env if env is not None else os.environ)
        super().__init__()

    @property
    def config(self) -> JaegerConfig:
        """The configuration in use (with the ports actually chosen once started)."""
        return self._config

    @property
    def log_path(self) -> Path | None:
        return Path(self._workdir.name) / "jaeger.log" if self._workdir is not None else None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start Jaeger and wait until it accepts spans and answers queries."""
        self._prepare()
        try:
            for attempt in range(1, _PORT_RETRIES + 1):
                self._spawn()
                try:
                    self._wait_ready()
                except JaegerError:
                    if not self._may_retry(attempt):
                        raise
                    continue
                return
        except BaseException:
            self.stop()
            raise

    async def astart(self) -> None:
        """:meth:`start` for async callers: the waiting happens off the loop, and a
        cancelled start-up stops Jaeger rather than leaving it to a thread."""
        await asyncio.to_thread(self._prepare)
        try:
            for attempt in range(1, _PORT_RETRIES + 1):
                self._spawn()
                try:
                    await asyncio.to_thread(self._wait_ready)
                except JaegerError:
                    if not self._may_retry(attempt):
                        raise
                    continue
                return
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise

    def _prepare(self) -> None:
        if self._workdir is not None:
            raise JaegerError("Jaeger is already started")
        if self._binary is None:
            self._binary = ensure(JAEGER, self._env)
        self._workdir = tempfile.TemporaryDirectory(prefix="rewardbus-jaeger-")

    def _may_retry(self, attempt: int) -> bool:
        """After a failed start: reap it; True when picking other free ports may help."""
        bind_failed = self._bind_failed()
        self._reap()
        # A port picked free may have been taken before Jaeger bound it.
        return 0 in self._requested.ports and attempt < _PORT_RETRIES and bind_failed

    def _spawn(self) -> None:
        assert self._workdir is not None and self._binary is not None
        self._config = self._requested.with_free_ports()
        work = Path(self._workdir.name)
        config_file = work / "jaeger.yaml"
        # JSON is YAML: no YAML library needed to write the collector's config.
        config_file.write_text(json.dumps(collector_config(self._config), indent=2))
        if self._log is not None:
            self._log.close()
        self._log = (work / "jaeger.log").open("wb")
        # SIGTERM if we die: Jaeger flushes and exits, and an orphan never keeps the ports.
        self._proc = ReapedChild(
            [str(self._binary), "--config", str(config_file)],
            cwd=work,
            log=self._log,
            env=self._env,
            death_signal=signal.SIGTERM,
            name="jaeger-child",
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._config.start_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.exited.is_set():
                raise JaegerError(
                    f"Jaeger exited with status {self._proc.returncode} during start-up: "
                    f"{self.log_tail()}"
                )
            if self.ready():
                return
            time.sleep(_READY_POLL_S)
        raise JaegerError(
            f"Jaeger not ready after {self._config.start_timeout_s:.0f} s: {self.log_tail()}"
        )

    def ready(self) -> bool:
        """True when the query API answers and both OTLP receivers accept connections."""
        return answers(self._config)

    def _bind_failed(self) -> bool:
        text = self.log_tail()
        return "address already in use" in text or "bind:" in text

    def log_tail(self) -> str:
        """The end of Jaeger's log (start-up errors say which port or setting failed)."""
        return log_tail(self.log_path)


def answers(config: JaegerConfig) -> bool:
    """True when a Jaeger at ``config``'s ports answers queries and accepts OTLP."""
    ports = (config.otlp_grpc_port, config.otlp_http_port)
    if not all(_accepts(config.host, port) for port in ports):
        return False
    try:
        with urllib.request.urlopen(f"{config.query_url}/api/v3/services", timeout=2) as reply:  # noqa: S310 -- our own http URL
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def ensure_running(
    config: JaegerConfig, *, env: Mapping[str, str], log_path: Path
) -> int | None:
    """A Jaeger on ``config``'s ports that outlives the caller (``rewardbus demo --trace``).

    One that already answers there is used as it is (None is returned). Otherwise
    ``rewardbus jaeger`` is started in a session of its own, its output in
    ``log_path``, and its pid returned once it is ready: the traces stay readable
    (``rewardbus trace``) after the caller exits, until that pid gets SIGTERM.
    """
    if await asyncio.to_thread(answers, config):
        return None
    await asyncio.to_thread(ensure, JAEGER, env)  # a first build runs in the foreground
    argv = [
        sys.executable, "-m", "rewardbus", "jaeger",
        "--otlp-grpc-port", str(config.otlp_grpc_port),
        "--otlp-http-port", str(config.otlp_http_port),
        "--query-port", str(config.query_port),
        "--query-grpc-port", str(config.query_grpc_port),
        "--max-traces", str(config.max_traces),
    ]  # fmt: skip
    pid = await asyncio.to_thread(_spawn_detached, argv, env, log_path)
    deadline = time.monotonic() + config.start_timeout_s
    while not await asyncio.to_thread(answers, config):
        exited = os.waitpid(pid, os.WNOHANG)[0] == pid  # noqa: ASYNC222 -- WNOHANG never blocks
        if exited or time.monotonic() > deadline:
            if not exited:
                os.kill(pid, signal.SIGTERM)
            tail = await asyncio.to_thread(_tail, log_path)
            raise JaegerError(f"Jaeger did not start (log {log_path}): {tail}")
        await asyncio.sleep(_READY_POLL_S)
    return pid


def _spawn_detached(argv: list[str], env: Mapping[str, str], log_path: Path) -> int:
    """Start ``argv`` in a new session, output appended to ``log_path``; its pid.

    posix_spawn rather than Popen: nothing here owns the child's lifetime, so
    there is no Popen object to complain at exit that its child still runs.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    append = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), append, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], argv, dict(env), file_actions=actions, setsid=True)


def _tail(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_bytes()[-_LOG_TAIL_BYTES:].decode("utf-8", "replace").strip()
    return "(no log)"


async def serve(
    config: JaegerConfig,
    *,
    env: Mapping[str, str],
    shutdown: Awaitable[object],
    on_ready: Callable[[JaegerConfig], None] | None = None,
) -> None:
    """Run Jaeger until ``shutdown`` completes, then stop it (``rewardbus jaeger``).

    Raises :class:`JaegerError` if it cannot start or exits on its own.
    """
    stop = asyncio.ensure_future(shutdown)
    try:
        async with JaegerProcess(config, env=env) as jaeger:
            if on_ready is not None:
                on_ready(jaeger.config)
            exited = asyncio.ensure_future(asyncio.to_thread(jaeger.wait))
            await asyncio.wait([stop, exited], return_when=asyncio.FIRST_COMPLETED)
            if not stop.done():
                raise JaegerError(
                    f"Jaeger exited on its own with status {exited.result()}: {jaeger.log_tail()}"
                )
    finally:
        stop.cancel()


def _accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False
