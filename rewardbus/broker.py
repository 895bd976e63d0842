"""An embedded single-node Apache Kafka broker for development, tests and the demo.

It runs the real Kafka (the jars that `make kafka-jars` copies from Maven Central) as a
child JVM in KRaft combined mode (one process is both broker and controller), bound to
127.0.0.1 only. The child can never outlive this Python process: it is spawned with
PR_SET_PDEATHSIG=SIGKILL from a thread that lives exactly as long as the child.

Errors: every failure is a `BrokerError` (a `RuntimeError`) whose message says what to do:
java missing, jars missing, the broker died during start-up (with the tail of its log), or
it did not become ready in time. None of them is worth retrying as is.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

__all__ = [
    "KAFKA_VERSION",
    "LOG4J2_PROPERTIES",
    "BrokerConfig",
    "BrokerError",
    "EmbeddedBroker",
    "default_kafka_lib",
    "serve",
]

KAFKA_VERSION = "4.1.1"
_MIN_JAVA_MAJOR = 17
_LOG_TAIL_LINES = 10
_LOG_CAUSE_LINES = 12
# How often the readiness loop re-checks whether start-up was aborted; the wait itself
# wakes at once when the broker process exits, so this is not a polling sleep.
_READY_RECHECK_S = 0.1
_PORT_RETRIES = 3
_INTERNAL_TOPIC_PARTITIONS = 4
# Class-data sharing explains every class it skips; none of that is actionable here.
_QUIET_CDS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")

# The same text as infra/kafka/log4j2.properties (an installed wheel has no infra/ dir);
# tests/integration/test_broker.py keeps the two in step.
LOG4J2_PROPERTIES = """\
# Quiet log4j2 configuration for the rewardbus Kafka broker.
#
# Everything at WARN and above goes to stderr; rewardbus/broker.py redirects the broker's
# stdout and stderr into <data dir>/broker.log and quotes its tail when start-up fails.
# INFO from KafkaRaftServer is kept: it is the one line that says the server started.
#
# rewardbus/broker.py writes an identical copy next to server.properties (an installed
# wheel carries no infra/ directory); tests/integration/test_broker.py checks they agree.
status = warn
name = rewardbus-kafka

appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d{ISO8601}] %p %c{1.} - %m%n

rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR

logger.raftserver.name = kafka.server.KafkaRaftServer
logger.raftserver.level = info
"""


class BrokerError(RuntimeError):
    """The embedded broker could not be started or died; the message says why and what to do."""


class _PortTaken(BrokerError):
    """A port picked at start was bound by someone else first; start() retries."""


@dataclass(frozen=True)
class BrokerConfig:
    """How to run the embedded broker. Every field has a working default.

    kafka_lib: directory of Kafka jars; None means `default_kafka_lib()`.
    data_dir: where storage, configuration and broker.log live; None means a fresh temporary
        directory, removed on stop. A given directory is kept and reused on the next start.
    port / controller_port: 0 picks a free port at start.
    num_partitions: default partition count of auto-created topics.
    heap: the JVM's maximum heap (-Xmx).
    startup_timeout_s: budget for formatting storage plus the broker becoming ready.
    node_id / quorum_voters / cluster_id: one node of a multi-node cluster
        (`rewardbus.cluster`): Kafka's `controller.quorum.voters` ("1@host:port,2@...") and
        the storage id all its nodes share. None (the default) is a single node formatted
        `--standalone` with a fresh id.
    replication_factor / min_insync_replicas: for the internal topics and as the defaults of
        new topics; 1 on a single node.
    """

    kafka_lib: Path | None = None
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0
    controller_port: int = 0
    num_partitions: int = 4
    heap: str = "512m"
    startup_timeout_s: float = 60.0
    node_id: int = 1
    quorum_voters: str | None = None
    cluster_id: str | None = None
    replication_factor: int = 1
    min_insync_replicas: int = 1


def default_kafka_lib() -> Path:
    """The jar directory `make kafka-jars` fills: $REWARDBUS_KAFKA_LIB, else the user cache."""
    explicit = os.environ.get("REWARDBUS_KAFKA_LIB")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("REWARDBUS_CACHE") or Path.home() / ".cache" / "rewardbus"
    return Path(cache) / f"kafka-{KAFKA_VERSION}" / "lib"


# --- environment checks ---------------------------------------------------------------


def _find_java() -> Path:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java not found: install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)"
        )
    return Path(found)


def _java_major_version(java: Path) -> int | None:
    """Read the major version from the JDK's `release` file: no JVM start needed."""
    release = java.resolve().parent.parent / "release"
    try:
        text = release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            version = line.partition("=")[2].strip().strip('"')
            head = version.split(".")[0]
            # Java 8 and older spell themselves 1.x.
            head = version.split(".")[1] if head == "1" and "." in version else head
            return int(head) if head.isdigit() else None
    return None


def _check_java(java: Path) -> None:
    major = _java_major_version(java)
    if major is not None and major < _MIN_JAVA_MAJOR:
        raise BrokerError(
            f"java at {java} is version {major}; Kafka {KAFKA_VERSION} needs Java "
            f"{_MIN_JAVA_MAJOR}+ (apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )


def _check_jars(lib: Path) -> None:
    if not any(lib.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Kafka jars not found in {lib}: run `make kafka-jars`")


# --- configuration files --------------------------------------------------------------


def _free_ports(host: str, count: int) -> list[int]:
    """Distinct free ports, held open together so the kernel cannot hand one out twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _new_cluster_id() -> str:
    # Kafka's Uuid.toString: url-safe base64 without padding; Kafka never issues one that
    # starts with "-" because command lines would read it as an option.
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def _server_properties(config: BrokerConfig, port: int, controller_port: int, log_dir: Path) -> str:
    host = config.host
    internal_topics = str(_INTERNAL_TOPIC_PARTITIONS)
    replicas, min_isr = str(config.replication_factor), str(config.min_insync_replicas)
    quorum = (
        {"controller.quorum.voters": config.quorum_voters}
        if config.quorum_voters
        else {"controller.quorum.bootstrap.servers": f"{host}:{controller_port}"}
    )
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(config.node_id),
        **quorum,
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": str(config.num_partitions),
        "auto.create.topics.enable": "true",
        # 1 on one node; a cluster's nodes replicate everything, internal topics included.
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        # The defaults (50 partitions each) are sized for clusters; on one node they only
        # slow the first consumer group and transaction down.
        "offsets.topic.num.partitions": internal_topics,
        "transaction.state.log.num.partitions": internal_topics,
        "share.coordinator.state.topic.num.partitions": internal_topics,
        "group.initial.rebalance.delay.ms": "0",
        # Unfencing waits for broker heartbeats; the 2 s default is most of start-up time.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "6000",
        # The cleaner stays on (compacted topics are used); its default 128 MiB dedupe
        # buffer would take a quarter of a small heap.
        "log.cleaner.enable": "true",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # Frugal thread pools for a 2-core machine.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "background.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclass(frozen=True)
class _Runtime:
    """The java binary and jar directory one start() runs with."""

    java: Path
    lib: Path

    def command(self, config: BrokerConfig, log4j: Path, cds: list[str]) -> list[str]:
        """The JVM's argv up to (not including) the main class."""
        return [
            str(self.java),
            f"-Xmx{config.heap}",
            # A single-node broker needs neither a concurrent collector nor C2; both cost
            # start-up time and CPU on a 2-core machine.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            *cds,
            "-XX:-UsePerfData",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Dlog4j2.disable.jmx=true",
            # Kafka logs while its own shutdown hook runs; log4j's hook would race it.
            "-Dlog4j2.shutdownHookEnabled=false",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.lib}/*",
        ]


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def _java_fingerprint(java: Path) -> str:
    release = java.resolve().parent.parent / "release"
    try:
        build = release.read_bytes()
    except OSError:
        build = b""
    return _digest(str(java.resolve()).encode(), build)


def _jars_fingerprint(lib: Path) -> str:
    jars = sorted(lib.glob("*.jar"))
    return _digest(
        *(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}".encode() for jar in jars)
    )


class _ClassArchive:
    """Application class-data sharing for the Kafka JVM: start-up ~2.0 s -> ~1.1 s.

    The first broker on a given Java build and jar set dumps the classes it loaded when it
    exits; later JVMs map that archive instead of loading and verifying the same classes
    again. Best effort: an unwritable cache or a killed broker means no archive, and
    -Xshare:auto ignores an archive that does not match.
    """

    def __init__(self, runtime: _Runtime) -> None:
        self._prefix = f"kafka-cds-{_java_fingerprint(runtime.java)}-"
        self.path = runtime.lib.parent / f"{self._prefix}{_jars_fingerprint(runtime.lib)}.jsa"
        self._pending: Path | None = None

    def use_flags(self) -> list[str]:
        """Map the archive if there is one."""
        return [f"-XX:SharedArchiveFile={self.path}", *_QUIET_CDS] if self.path.is_file() else []

    def broker_flags(self) -> list[str]:
        """Map the archive, or have this JVM write one at exit if none exists yet."""
        if self.path.is_file() or not os.access(self.path.parent, os.W_OK):
            return self.use_flags()
        # A private name: brokers starting together each dump their own, the last one wins.
        self._pending = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        return [f"-XX:ArchiveClassesAtExit={self._pending}", *_QUIET_CDS]

    def finish(self, *, clean_exit: bool) -> None:
        """Publish the archive the broker wrote at a clean exit; discard a partial one."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if not (clean_exit and pending.is_file()):
            pending.unlink(missing_ok=True)
            return
        os.replace(pending, self.path)
        # Archives of this Java for older jar sets are dead weight (~50 MB each).
        for stale in self.path.parent.glob(f"{self._prefix}*.jsa"):
            if stale != self.path:
                stale.unlink(missing_ok=True)


# --- child processes ------------------------------------------------------------------


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn that SIGKILLs the child when its parent thread dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
        # The parent may have died between fork and prctl: then nobody would ever signal.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class _Child:
    """A child process forked by, and reaped by, a thread that lives exactly as long as it.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process.
    Forking from this dedicated thread makes the signal mean "the Python process died",
    whichever (possibly short-lived) thread called start().
    """

    def __init__(self, argv: list[str], *, cwd: Path, log: IO[bytes]) -> None:
        self.exited = threading.Event()
        self._spawned = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: OSError | None = None
        thread = threading.Thread(
            target=self._run, args=(argv, cwd, log), name="kafka-broker-child", daemon=True
        )
        thread.start()
        self._spawned.wait()
        if self._error is not None:
            raise BrokerError(f"could not start {argv[0]}: {self._error}") from self._error

    def _run(self, argv: list[str], cwd: Path, log: IO[bytes]) -> None:
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: a terminal's Ctrl-C reaches only us, and we stop it.
                process_group=0,
                preexec_fn=_parent_death_signal(),  # noqa: PLW1509 - prctl must run in the child
            )
        except OSError as exc:
            self._error = exc
            return
        finally:
            self._spawned.set()
        self._proc.wait()
        self.exited.set()

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    def send(self, signum: signal.Signals) -> None:
        # Popen.send_signal skips a reaped child, so a recycled pid is never hit.
        if self._proc is not None and not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signum)

    def terminate(self, timeout_s: float) -> None:
        """SIGTERM, wait up to timeout_s, then SIGKILL; return once the child is reaped."""
        self.send(signal.SIGTERM)
        if not self.exited.wait(timeout_s):
            self.kill()

    def kill(self) -> None:
        self.send(signal.SIGKILL)
        self.exited.wait()


def _run_storage_tool(argv: list[str], *, cwd: Path, timeout_s: float) -> None:
    try:
        result = subprocess.run(  # noqa: S603 - a fixed argv, no shell
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            check=False,
            preexec_fn=_parent_death_signal(),
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(f"formatting Kafka storage took over {timeout_s:.0f}s") from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise BrokerError(f"formatting Kafka storage failed (exit {result.returncode}):\n{output}")


def _is_cause(line: str) -> bool:
    return " ERROR " in line or line.startswith(("Caused by:", "Error:", "Exception in thread"))


def _is_stack_frame(line: str) -> bool:
    stripped = line.lstrip()
    return stripped.startswith("at ") or (stripped.startswith("... ") and line != stripped)


def _log_excerpt(path: Path) -> str:
    """The broker log's distinct errors and causes, then its last lines without stack frames:
    the line that names the problem is rarely among the last ones of a Java log."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"(no broker log at {path})"
    lines = [line for line in lines if not _is_stack_frame(line)]
    causes = list(dict.fromkeys(line for line in lines if _is_cause(line)))[:_LOG_CAUSE_LINES]
    tail = lines[-_LOG_TAIL_LINES:]
    parts = [f"errors in {path}:", *causes] if causes else []
    parts += [f"last lines of {path}:", *tail] if tail else [f"{path} is empty"]
    return "\n".join(parts)


def _bind_failed(log_text: str, host: str, port: int) -> bool:
    # Kafka: "Socket server failed to bind to 127.0.0.1:9092: Address already in use."
    return f"{host}:{port}: Address already in use" in log_text


# --- readiness ------------------------------------------------------------------------

_PROBE_CORRELATION_ID = 0x72627573  # "rbus"
_PROBE_CLIENT_ID = b"rewardbus-probe"
# ApiVersions v0 (api key 18) is the one request every Kafka version answers.
_PROBE_REQUEST = (
    struct.pack(">hhih", 18, 0, _PROBE_CORRELATION_ID, len(_PROBE_CLIENT_ID)) + _PROBE_CLIENT_ID
)
_PROBE_FRAME = struct.pack(">i", len(_PROBE_REQUEST)) + _PROBE_REQUEST


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        data += chunk
    return data


def _answers_api_versions(host: str, port: int, timeout_s: float) -> bool:
    """True once the broker answers Kafka requests on its client listener.

    A KRaft broker only starts processing client requests after the controller has
    unfenced it, so an answer here means clients can create topics and produce.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(_PROBE_FRAME)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            body = _recv_exact(sock, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack_from(">ih", body)
    return bool(correlation_id == _PROBE_CORRELATION_ID and error_code == 0)


# --- the broker -----------------------------------------------------------------------

# A JVM stopped by SIGTERM runs its shutdown hooks and exits with 128 + 15.
_CLEAN_EXIT = (0, 128 + signal.SIGTERM)
# At interpreter exit nobody waits on the broker, but a clean stop keeps a kept data_dir sane.
_EXIT_GRACE_S = 5.0


@dataclass(frozen=True)
class _Layout:
    """Where a broker's files live inside its data directory."""

    root: Path

    @property
    def server_properties(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def broker_log(self) -> Path:
        return self.root / "broker.log"

    @property
    def log_dir(self) -> Path:
        return self.root / "kraft-logs"

    @property
    def formatted(self) -> bool:
        return (self.log_dir / "meta.properties").exists()


@dataclass
class _Run:
    """Everything one start() set up, so that stop() and the exit-time finalizer undo it."""

    layout: _Layout
    port: int
    controller_port: int
    temp_dir: Path | None
    archive: _ClassArchive | None = None
    child: _Child | None = None

    def release(self, timeout_s: float) -> None:
        """Stop and reap the JVM, keep or drop its class archive, remove temp data. Idempotent."""
        if self.child is not None:
            self.child.terminate(timeout_s)
            if self.archive is not None:
                self.archive.finish(clean_exit=self.child.returncode in _CLEAN_EXIT)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


def _resolve_runtime(config: BrokerConfig) -> _Runtime:
    java = _find_java()
    _check_java(java)
    lib = config.kafka_lib or default_kafka_lib()
    _check_jars(lib)
    return _Runtime(java=java, lib=lib)


def _new_run(config: BrokerConfig) -> _Run:
    temp_dir = None
    root = config.data_dir
    if root is None:
        root = temp_dir = Path(tempfile.mkdtemp(prefix="rewardbus-kafka-"))
    client_port, controller_port = _free_ports(config.host, 2)
    return _Run(
        layout=_Layout(root),
        port=config.port or client_port,
        controller_port=config.controller_port or controller_port,
        temp_dir=temp_dir,
    )


class EmbeddedBroker:
    """A real single-node Kafka broker in a child JVM, for tests, the demo and development.

    Use it as a (sync or async) context manager, or call `start()` and `stop()`.
    `stop()` is idempotent; the JVM is stopped at interpreter exit and, on Linux, killed
    the moment this process dies, so no broker is ever left behind.
    """

    def __init__(self, config: BrokerConfig = BrokerConfig()) -> None:
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
            runtime = _resolve_runtime(self._config)
            for attempt in range(1, _PORT_RETRIES + 1):
                try:
                    run = self._start_once(runtime, deadline)
                except _PortTaken:
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
        if child is None or not child.exited.wait(timeout_s):
            return None
        return child.returncode

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(self.start)
        except asyncio.CancelledError:
            # The start-up thread carries on after a cancel; stop() aborts and cleans it up.
            await asyncio.to_thread(self.stop)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    # -- internals --

    def _start_once(self, runtime: _Runtime, deadline: float) -> _Run:
        run = _new_run(self._config)
        try:
            self._write_config(run)
            run.archive = _ClassArchive(runtime)
            if not run.layout.formatted:
                self._format(runtime, run, deadline)
            run.child = self._launch(runtime, run)
            self._await_ready(run, deadline)
        except BaseException:
            run.release(timeout_s=0)
            raise
        return run

    def _write_config(self, run: _Run) -> None:
        layout = run.layout
        layout.root.mkdir(parents=True, exist_ok=True)
        layout.server_properties.write_text(
            _server_properties(self._config, run.port, run.controller_port, layout.log_dir),
            encoding="utf-8",
        )
        layout.log4j.write_text(LOG4J2_PROPERTIES, encoding="utf-8")

    def _format(self, runtime: _Runtime, run: _Run, deadline: float) -> None:
        assert run.archive is not None
        argv = [
            *runtime.command(self._config, run.layout.log4j, run.archive.use_flags()),
            "kafka.tools.StorageTool",
            "format",
            # A static voter set (a cluster) needs no bootstrap controller of its own.
            *([] if self._config.quorum_voters else ["--standalone"]),
            "--cluster-id",
            self._config.cluster_id or _new_cluster_id(),
            "--config",
            str(run.layout.server_properties),
        ]
        _run_storage_tool(
            argv, cwd=run.layout.root, timeout_s=max(deadline - time.monotonic(), 1.0)
        )

    def _launch(self, runtime: _Runtime, run: _Run) -> _Child:
        assert run.archive is not None
        argv = [
            *runtime.command(self._config, run.layout.log4j, run.archive.broker_flags()),
            "kafka.Kafka",
            str(run.layout.server_properties),
        ]
        with run.layout.broker_log.open("ab") as log:
            return _Child(argv, cwd=run.layout.root, log=log)

    def _await_ready(self, run: _Run, deadline: float) -> None:
        assert run.child is not None
        while not self._abort.is_set():
            if run.child.exited.is_set():
                self._raise_exited(run)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log = run.layout.broker_log
                raise BrokerError(
                    f"the Kafka broker was not ready within {self._config.startup_timeout_s:g}s;"
                    f" {_log_excerpt(log)}"
                )
            if _answers_api_versions(self._config.host, run.port, min(remaining, 5.0)):
                return
            run.child.exited.wait(min(remaining, _READY_RECHECK_S))
        raise BrokerError("broker start-up was aborted by stop()")

    def _raise_exited(self, run: _Run) -> None:
        excerpt = _log_excerpt(run.layout.broker_log)
        if any(_bind_failed(excerpt, self._config.host, port) for port in self._picked_ports(run)):
            # Another process bound a port we picked before the broker did: pick again.
            raise _PortTaken(f"a port picked for the broker was taken first; {excerpt}")
        code = run.child.returncode if run.child is not None else None
        raise BrokerError(f"the Kafka broker exited with status {code} during start-up; {excerpt}")

    def _picked_ports(self, run: _Run) -> list[int]:
        pairs = [(self._config.port, run.port), (self._config.controller_port, run.controller_port)]
        return [actual for configured, actual in pairs if configured == 0]


async def serve(
    config: BrokerConfig,
    *,
    shutdown: Awaitable[object],
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a broker until `shutdown` completes, then stop it (the CLI's `rewardbus broker`).

    `on_ready` receives the bootstrap address once clients can connect. A shutdown during
    start-up aborts the start-up. Raises BrokerError if the broker cannot start or exits on
    its own; `shutdown` is then cancelled. The broker is stopped however this returns.
    """
    broker = EmbeddedBroker(config)
    stop_requested = asyncio.ensure_future(shutdown)
    try:
        if await _start_unless_stopped(broker, stop_requested):
            if on_ready is not None:
                on_ready(broker.bootstrap_servers)
            await _run_until_stopped(broker, stop_requested)
    finally:
        stop_requested.cancel()
        await asyncio.to_thread(broker.stop)


async def _first_done(*futures: asyncio.Future[Any]) -> None:
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


async def _start_unless_stopped(
    broker: EmbeddedBroker, stop_requested: asyncio.Future[object]
) -> bool:
    """Start the broker; False when shutdown came first (the start-up is then aborted)."""
    started = asyncio.ensure_future(asyncio.to_thread(broker.start))
    try:
        await _first_done(stop_requested, started)
    except asyncio.CancelledError:
        await _abort_start(broker, started)
        raise
    if not started.done():
        await _abort_start(broker, started)
        return False
    started.result()
    return not stop_requested.done()


async def _abort_start(broker: EmbeddedBroker, started: asyncio.Future[None]) -> None:
    # stop() makes a start-up under way give up; then collect its "aborted" error.
    await asyncio.to_thread(broker.stop)
    with contextlib.suppress(BrokerError):
        await started


async def _run_until_stopped(
    broker: EmbeddedBroker, stop_requested: asyncio.Future[object]
) -> None:
    exited = asyncio.ensure_future(asyncio.to_thread(broker.wait))
    try:
        await _first_done(stop_requested, exited)
    finally:
        # Its thread returns as soon as stop() reaps the broker.
        exited.cancel()
    if stop_requested.done():
        if not stop_requested.cancelled():
            stop_requested.result()  # a failing shutdown trigger is the caller's error to see
        return
    log = broker.log_path
    excerpt = _log_excerpt(log) if log is not None else "(no broker log)"
    raise BrokerError(
        f"the Kafka broker exited unexpectedly with status {exited.result()}; {excerpt}"
    )
