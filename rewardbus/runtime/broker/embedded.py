"""`EmbeddedBroker`: one real Kafka node in a child JVM, started and stopped by us.

start() writes the node's configuration into its data directory, formats storage on the
first start, launches the JVM (a `ReapedChild`, so it can never outlive this process) and
returns once the broker answers an ApiVersions request. Ports picked free are picked again
when someone else binds one first.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from rewardbus.runtime.broker.broker_log import bind_failed, log_excerpt
from rewardbus.runtime.broker.class_archive import ClassArchive
from rewardbus.runtime.broker.config import BrokerConfig
from rewardbus.runtime.broker.errors import BrokerError, PortTaken
from rewardbus.runtime.broker.jvm import KafkaRuntime, resolve_runtime
from rewardbus.runtime.broker.layout import DataLayout
from rewardbus.runtime.broker.log4j import log4j2_properties
from rewardbus.runtime.broker.readiness import answers_api_versions
from rewardbus.runtime.broker.server_properties import server_properties
from rewardbus.runtime.broker.storage import format_storage
from rewardbus.runtime.ports import free_ports
from rewardbus.runtime.reaped_child import ReapedChild
from rewardbus.runtime.service import BlockingService

__all__ = ["EmbeddedBroker"]

# How often the readiness loop re-checks whether start-up was aborted; the wait itself
# wakes at once when the broker process exits, so this is not a polling sleep.
_READY_RECHECK_S = 0.1
_PORT_RETRIES = 3
# A JVM stopped by SIGTERM runs its shutdown hooks and exits with 128 + 15.
_CLEAN_EXIT = (0, 128 + signal.SIGTERM)
# At interpreter exit nobody waits on the broker, but a clean stop keeps a kept data_dir sane.
_EXIT_GRACE_S = 5.0


@dataclass
class _Run:
    """Everything one start() set up, so that stop() and the exit-time finalizer undo it."""

    layout: DataLayout
    port: int
    controller_port: int
    temp_dir: Path | None
    archive: ClassArchive | None = None
    child: ReapedChild | None = None

    def release(self, timeout_s: float) -> None:
        """Stop and reap the JVM, keep or drop its class archive, remove temp data. Idempotent."""
        if self.child is not None:
            self.child.terminate(timeout_s)
            if self.archive is not None:
                self.archive.finish(clean_exit=self.child.returncode in _CLEAN_EXIT)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def _new_run(config: BrokerConfig) -> _Run:
    temp_dir = None
    root = config.data_dir
    if root is None:
        root = temp_dir = Path(tempfile.mkdtemp(prefix="rewardbus-kafka-"))
    client_port, controller_port = free_ports(config.host, 2)
    return _Run(
        layout=DataLayout(root),
        port=config.port or client_port,
        controller_port=config.controller_port or controller_port,
        temp_dir=temp_dir,
    )


class EmbeddedBroker(BlockingService):
    """A real single-node Kafka broker in a child JVM, for tests, the demo and development.

    Use it as a (sync or async) context manager, or call `start()` and `stop()`.
    `stop()` is idempotent; the JVM is stopped at interpreter exit and, on Linux, killed
    the moment this process dies, so no broker is ever left behind.
    """

    # A frozen dataclass (ruff cannot see that across modules): one shared default is safe.
    def __init__(self, config: BrokerConfig = BrokerConfig()) -> None:  # noqa: B008
        self._config = config
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._run: _Run | None = None
        self._finalizer: weakref.finalize[[float], EmbeddedBroker] | None = None

    @property
    def config(self) -> BrokerConfig:
        """The configuration this broker was made with."""
        return self._config

    @property
    def bootstrap_servers(self) -> str:
        """The client address, "127.0.0.1:PORT"; with port 0 it is known only after start()."""
        port = self._run.port if self._run is not None else self._config.port
        if port == 0:
            raise BrokerError("the broker's port is chosen by start(): start it first")
        return f"{self._config.host}:{port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's stdout/stderr log while it runs (removed on stop with a temp dir)."""
        return self._run.layout.broker_log if self._run is not None else None

    @property
    def pid(self) -> int | None:
        """The broker JVM's process id while it is started."""
        child = self._run.child if self._run is not None else None
        return child.pid if child is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        child = self._run.child if self._run is not None else None
        return child is not None and not child.exited.is_set()

    def start(self) -> None:
        """Format storage if needed, launch the broker and return once it serves clients.

        Blocks for a few seconds. Raises BrokerError, with the tail of the broker's log when
        there is one, if java or the jars are missing, or the broker dies or is not ready
        within `startup_timeout_s`. On failure nothing is left running.
        """
        with self._lock:
            if self._run is not None:
                raise BrokerError("the broker is already started")
            self._abort.clear()
            deadline = time.monotonic() + self._config.startup_timeout_s
            runtime = resolve_runtime(self._config)
            for attempt in range(1, _PORT_RETRIES + 1):
                try:
                    run = self._start_once(runtime, deadline)
                except PortTaken:
                    if attempt == _PORT_RETRIES:
                        raise
                else:
                    self._run = run
                    self._finalizer = weakref.finalize(self, run.release, _EXIT_GRACE_S)
                    return

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the broker: SIGTERM, wait up to timeout_s, then SIGKILL; reap it; remove a
        temporary data directory. Safe to call any number of times, and during start()."""
        self._abort.set()
        with self._lock:
            run, self._run = self._run, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            if run is not None:
                run.release(timeout_s)

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would, and reap it (fault tests). A kept data_dir
        survives, so start() brings the same node back; a temporary one is removed."""
        child = self._run.child if self._run is not None else None
        if child is not None:
            child.kill()
        self.stop()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Block until the broker process exits; return its exit status (None on timeout
        or when it is not started)."""
        child = self._run.child if self._run is not None else None
        return child.wait(timeout_s) if child is not None else None

    # -- internals --

    def _start_once(self, runtime: KafkaRuntime, deadline: float) -> _Run:
        run = _new_run(self._config)
        try:
            self._write_config(run)
            run.archive = ClassArchive(runtime)
            if not run.layout.formatted:
                format_storage(runtime, self._config, run.layout, run.archive.use_flags(), deadline)
            run.child = self._launch(runtime, run, run.archive)
            self._await_ready(run, run.child, deadline)
        except BaseException:
            run.release(timeout_s=0)
            raise
        return run

    def _write_config(self, run: _Run) -> None:
        layout = run.layout
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.server_properties.write_text(
            server_properties(self._config, run.port, run.controller_port, layout.log_dir),
            encoding="utf-8",
        )
        layout.log4j.write_text(log4j2_properties(), encoding="utf-8")

    def _launch(self, runtime: KafkaRuntime, run: _Run, archive: ClassArchive) -> ReapedChild:
        argv = [
            *runtime.command(self._config, run.layout.log4j, archive.broker_flags()),
            "kafka.Kafka",
            str(run.layout.server_properties),
        ]
        with run.layout.broker_log.open("ab") as log:
            try:
                return ReapedChild(argv, cwd=run.layout.root, log=log, name="kafka-broker-child")
            except OSError as exc:
                raise BrokerError(f"could not start {argv[0]}: {exc}") from exc

    def _await_ready(self, run: _Run, child: ReapedChild, deadline: float) -> None:
        while not self._abort.is_set():
            if child.exited.is_set():
                self._raise_exited(run, child)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerError(
                    f"the Kafka broker was not ready within {self._config.startup_timeout_s:g}s;"
                    f" {log_excerpt(run.layout.broker_log)}"
                )
            if answers_api_versions(self._config.host, run.port, min(remaining, 5.0)):
                return
            child.exited.wait(min(remaining, _READY_RECHECK_S))
        raise BrokerError("broker start-up was aborted by stop()")

    def _raise_exited(self, run: _Run, child: ReapedChild) -> None:
        excerpt = log_excerpt(run.layout.broker_log)
        if any(bind_failed(excerpt, self._config.host, port) for port in self._picked_ports(run)):
            # Another process bound a port we picked before the broker did: pick again.
            raise PortTaken(f"a port picked for the broker was taken first; {excerpt}")
        raise BrokerError(
            f"the Kafka broker exited with status {child.returncode} during start-up; {excerpt}"
        )

    def _picked_ports(self, run: _Run) -> list[int]:
        pairs = [(self._config.port, run.port), (self._config.controller_port, run.controller_port)]
        return [actual for configured, actual in pairs if configured == 0]
