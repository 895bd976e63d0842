"""Launching jails, driven by the event loop: no threads, no timers polling.

A :class:`Spawner` is a long-lived ``rbjail --spawner`` sitting in one cgroup
slot. Per execution it forks the jail's init, born inside the slot's cgroups
(moving a process into a cgroup can cost a full RCU grace period, ~10 ms on
cgroup v1) as pid 1 of a new pid namespace (without the namespaces layer, a
supervisor above init), and answers with a pidfd for it.

A :class:`Launch` is one execution, started by any
:class:`~sandbox_workers.pool.JailSpawner` (a slot's :class:`Spawner`, or a
warm zygote standing in for one) and watched through file descriptors the loop
already multiplexes: the jail's pidfd (exit, of every process of it), the
stdout/stderr pipes (read with a cap), the stdin pipe (written as the program
reads) and a SOCK_SEQPACKET status socket over which the jail's init reports
"ready" (with an fd of /work), "result ..." or "error ...".

A session's launch (``rbjail --session``) runs its program once per
:meth:`Launch.run`, each :class:`SessionRun` with stdio pipes of its own, passed
to the jail's init with the request.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sandbox_workers.pool.slot import JailSpawner
from sandbox_workers.sandbox import SandboxFault

__all__ = ["InteractiveLaunch", "JailReport", "Launch", "SessionRun", "Spawner", "monotonic_ms"]

_CHUNK = 1 << 16
_RESET_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGCHLD,
    signal.SIGUSR1,
)
# After a stop request the jail's init (or supervisor) has this long to take the
# jail down before it is SIGKILLed (the kernel then kills its pid namespace).
_STOP_GRACE_S = 2.0
# A session's run is given this long past its backstop's cap before the jail is stopped.
_SESSION_GRACE_S = 1.0


@dataclass(frozen=True)
class JailReport:
    """What the jail's init measured: the program's status and resource use.

    ``cpu_ms`` is the CPU time the limit was enforced on (the whole jail's,
    measured as ``cpu_source`` says); ``limit`` is the limit that ended a
    timed-out run: ``"cpu"`` or ``"wall"`` (the backstop); ``waited_ms`` how
    long the program's live threads had waited for a CPU when it exited.
    """

    exit_code: int | None
    signal: int | None
    wall_ms: float
    cpu_ms: float
    maxrss_kb: int
    timed_out: bool
    limit: str | None = None
    cpu_source: str = ""
    waited_ms: float = 0.0


def _parse_report(text: str) -> JailReport:
    fields = dict(item.split("=", 1) for item in text.split()[1:])
    exit_code = int(fields["exit"])
    signum = int(fields["signal"])
    reaped_us = int(fields["utime_us"]) + int(fields["stime_us"])
    limit = fields.get("limit", "none")
    return JailReport(
        exit_code=None if exit_code < 0 else exit_code,
        signal=signum or None,
        wall_ms=int(fields["wall_us"]) / 1000,
        cpu_ms=int(fields.get("cpu_us", reaped_us)) / 1000,
        maxrss_kb=int(fields["maxrss_kb"]),
        timed_out=fields["timed_out"] == "1",
        limit=None if limit == "none" else limit,
        cpu_source=fields.get("cpu_source", ""),
        waited_ms=int(fields.get("waited_us", 0)) / 1000,
    )


def monotonic_ms() -> float:
    """Milliseconds on the monotonic clock (wall time measured on the worker side)."""
    return time.monotonic() * 1000


def _high_fd(fd: int) -> int:
    """Move fd above 3 so a dup2 onto 0-3 never clobbers a source."""
    if fd > 3:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 4)
    os.close(fd)
    return new


def _recv_with_fds(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the fds passed with it (close-on-exec: never inherited)."""
    msg, ancdata, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(16), socket.MSG_CMSG_CLOEXEC)
    fds = [
        fd
        for level, kind, data in ancdata
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
        for fd in array.array("i", data[: len(data) - len(data) % 4])
    ]
    return msg, fds


# ---------------------------------------------------------------------- spawner


class Spawner:
    """A ``rbjail --spawner`` process, inside one slot's cgroups, forking jails."""

    def __init__(
        self, launcher: str, procs_files: Sequence[Path], *, share_net: bool = False
    ) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [launcher, "--spawner", "--parent-pid", str(os.getpid())]
        for procs in procs_files:
            argv += ["--cgroup-procs", str(procs)]
        if share_net:  # its jails share a net namespace while they leave no trace in it
            argv.append("--share-net")
        devnull = _high_fd(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
        control = _high_fd(theirs.detach())
        try:
            self.pid = os.posix_spawn(
                launcher,
                argv,
                {},
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate([devnull] * 3)]
                + [(os.POSIX_SPAWN_DUP2, control, 3)],
                setpgroup=0,  # the terminal's ^C is for the worker, which drains
                setsigmask=(),
                setsigdef=_RESET_SIGNALS,
            )
        except OSError as exc:
            ours.close()
            raise SandboxFault(f"cannot start the jail spawner: {exc}") from exc
        finally:
            os.close(devnull)
            os.close(control)
        self._sock = ours
        self._pidfd = os.pidfd_open(self.pid)
        self._closed = False

    @property
    def alive(self) -> bool:
        """False once the spawner has exited (it is then reaped by :meth:`close`)."""
        return not self._closed and not _readable(self._pidfd)

    async def spawn(self, options: Sequence[str], fds: Sequence[int]) -> int:
        """Fork a jail with ``options`` and stdin/stdout/stderr/status ``fds``.

        Returns a pidfd of the jail's init, or of its supervisor without the
        namespaces layer (not our child: the spawner reaps it). Readable once
        every process of the jail is dead (init is pid 1 of its pid namespace).
        """
        payload = "\0".join(options).encode()
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[tuple[bytes, list[int]]] = loop.create_future()

        def readable() -> None:
            try:
                result = _recv_with_fds(self._sock)
            except BlockingIOError:
                return
            except OSError:
                result = (b"", [])
            loop.remove_reader(self._sock.fileno())
            if not reply.done():
                reply.set_result(result)
            else:
                for fd in result[1]:
                    os.close(fd)

        try:
            self._sock.sendmsg([payload], rights)
        except OSError as exc:
            raise SandboxFault(f"the jail spawner is gone: {exc}") from exc
        loop.add_reader(self._sock.fileno(), readable)
        try:
            msg, got = await reply
        finally:
            loop.remove_reader(self._sock.fileno())
        text = msg.decode(errors="replace")
        if not text.startswith("spawned ") or len(got) != 1:
            for fd in got:
                os.close(fd)
            raise SandboxFault(f"the jail spawner failed: {text or 'it exited'}")
        return got[0]

    def close(self) -> None:
        """Stop and reap the spawner (the jails it forked die with it: PR_SET_PDEATHSIG)."""
        if self._closed:
            return
        self._closed = True
        self._sock.close()
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)  # SIGKILLed: returns at once
        os.close(self._pidfd)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


# ---------------------------------------------------------------------- output


class _Capture:
    """Reads one pipe to EOF, keeping at most ``cap`` bytes."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, cap: int, on_overflow: Callable[[], None]
    ) -> None:
        self._loop, self._fd, self._cap = loop, fd, cap
        self._on_overflow = on_overflow
        self._chunks: list[bytes] = []
        self._size = 0
        self.exceeded = False
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
            return
        room = self._cap - self._size
        if len(data) > room:
            data = data[: max(room, 0)]
            if not self.exceeded:
                self.exceeded = True
                self._on_overflow()
        self._chunks.append(data)
        self._size += len(data)

    @property
    def data(self) -> bytes:
        return b"".join(self._chunks)

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if not self.done.done():
            self.done.set_result(None)


class _Feeder:
    """Writes stdin as fast as the program reads it, then closes the pipe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, data: bytes) -> None:
        self._loop, self._fd = loop, fd
        self._view = memoryview(data)
        self._waiting = False
        os.set_blocking(fd, False)
        self._writable()

    def _writable(self) -> None:
        try:
            while self._view:
                written = os.write(self._fd, self._view)
                self._view = self._view[written:]
        except BlockingIOError:
            if not self._waiting:
                self._waiting = True
                self._loop.add_writer(self._fd, self._writable)
            return
        except OSError:
            pass  # the program closed stdin or died: what it did not read is dropped
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_writer(self._fd)
            os.close(self._fd)
            self._fd = -1


def _stdio_pipes(
    loop: asyncio.AbstractEventLoop, stdin: bytes, output_cap: int, on_overflow: Callable[[], None]
) -> tuple[list[int], _Capture, _Capture, _Feeder | None]:
    """The child's ends [stdin, stdout, stderr], and ours: two captures and a feeder."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if stdin:
        in_r, in_w = os.pipe()
    else:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
    stdout = _Capture(loop, out_r, output_cap, on_overflow)
    stderr = _Capture(loop, err_r, output_cap, on_overflow)
    feeder = _Feeder(loop, in_w, stdin) if in_w >= 0 else None
    return [in_r, out_w, err_w], stdout, stderr, feeder


class _Captured:
    """What a run wrote on its stdout and stderr (each read to EOF, up to a cap)."""

    _stdout: _Capture
    _stderr: _Capture

    @property
    def stdout(self) -> bytes:
        return self._stdout.data

    @property
    def stderr(self) -> bytes:
        return self._stderr.data

    @property
    def output_exceeded(self) -> bool:
        return self._stdout.exceeded or self._stderr.exceeded


class SessionRun(_Captured):
    """One run of a session's program: its stdio, its report, why it was stopped."""

    def __init__(self, stdin: bytes, output_cap: int, on_overflow: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self.report: JailReport | None = None
        self.stop_reason: str | None = None
        # Set on the run's "result", an "error", or the jail's end.
        self.settled: asyncio.Future[None] = loop.create_future()

        def overflow() -> None:
            self.stop_reason = self.stop_reason or "output"
            on_overflow()

        self.child_fds, self._stdout, self._stderr, self._stdin = _stdio_pipes(
            loop, stdin, output_cap, overflow
        )

    def settle(self, report: JailReport | None = None) -> None:
        if report is not None:
            self.report = report
        if not self.settled.done():
            self.settled.set_result(None)

    @property
    def waits(self) -> list[asyncio.Future[None]]:
        return [self.settled, self._stdout.done, self._stderr.done]

    def close_child_fds(self) -> None:
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds = []

    def close(self) -> None:
        self.close_child_fds()
        for stream in (self._stdout, self._stderr):
            stream.close()
        if self._stdin is not None:
            self._stdin.close()


# ---------------------------------------------------------------------- one execution


class Launch(_Captured):
    """One execution: ``await start()``, ``await ready()``, ``go()``, ``await finish()``."""

    def __init__(self, stdin: bytes, output_cap: int) -> None:
        self._loop = asyncio.get_running_loop()
        self.report: JailReport | None = None
        self.error: str | None = None
        self.stop_reason: str | None = None
        self.exited = False
        self._workfd: int | None = None
        self._pidfd = -1
        self._ready = asyncio.Event()
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self._run: SessionRun | None = None
        self._status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._status.setblocking(False)
        stdio, self._stdout, self._stderr, self._stdin = self._stdio(stdin, output_cap)
        self._child_fds = [*stdio, theirs.detach()]
        self._loop.add_reader(self._status.fileno(), self._drain_status)

    def _stdio(
        self, stdin: bytes, output_cap: int
    ) -> tuple[list[int], _Capture, _Capture, _Feeder | None]:
        return _stdio_pipes(self._loop, stdin, output_cap, lambda: self.stop("output"))

    async def start(self, spawner: JailSpawner, options: Sequence[str]) -> None:
        """Have ``spawner`` fork this execution's jail."""
        try:
            self._pidfd = await spawner.spawn(options, self._child_fds)
        finally:
            # Our copies must go, or the pipes would never reach EOF.
            for fd in self._child_fds:
                os.close(fd)
            self._child_fds = []
        self._loop.add_reader(self._pidfd, self._on_exit)

    # ------------------------------------------------------------------ events

    def _on_exit(self) -> None:
        self._loop.remove_reader(self._pidfd)
        self.exited = True
        self._drain_status()
        if self._run is not None:
            self._run.settle()
        if not self._exited.done():
            self._exited.set_result(None)
        self._ready.set()

    def _drain_status(self) -> None:
        while self._status.fileno() >= 0:
            try:
                msg, fds = _recv_with_fds(self._status)
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionResetError:
                # Init exited with a message of ours unread (the kernel says so
                # once); what it sent before that is still queued.
                continue
            except OSError:
                msg, fds = b"", []
            if not msg:
                for fd in fds:
                    os.close(fd)
                self._loop.remove_reader(self._status.fileno())
                self._status.close()
                self._ready.set()
                return
            self._handle(msg.decode(errors="replace"), fds)

    def _handle(self, text: str, fds: list[int]) -> None:
        if text == "ready" and fds and self._workfd is None:
            self._workfd = fds.pop(0)
            self._ready.set()
        elif text.startswith("result "):
            if self._run is not None:
                self._run.settle(_parse_report(text))
            else:
                self.report = _parse_report(text)
        elif text.startswith("error "):
            self.error = text[len("error ") :]
            self._ready.set()
            if self._run is not None:
                self._run.settle()
        for fd in fds:
            os.close(fd)

    # ------------------------------------------------------------------ control

    async def ready(self, timeout_s: float) -> int:
        """The fd of the jail's /work once the jail is built; SandboxFault if it failed."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            self.stop("setup timeout")
            raise SandboxFault(f"jail not ready within {timeout_s:.1f} s") from None
        if self._workfd is None or self.error is not None:
            await self._settle(_STOP_GRACE_S)
            raise SandboxFault(self._failure("jail setup failed"))
        fd, self._workfd = self._workfd, None
        return fd

    def go(self) -> None:
        """Let the program start (the jail's init waits for this)."""
        with contextlib.suppress(OSError):
            self._status.send(b"go")

    @property
    def serving(self) -> bool:
        """A session's jail that can take another run: up, and neither failed nor stopped."""
        return not self.exited and self.error is None and self.stop_reason is None

    async def run(self, run: SessionRun, cpu_ms: int, wall_ms: int, wall_cap_ms: int) -> None:
        """Run a session's program once more with ``run``'s stdio, until it ends.

        The jail enforces the limits; past the backstop's cap plus a grace the
        whole jail is stopped (as :meth:`finish` does). ``run.report`` stays None
        when the run ended with the jail (a fault, or a stop).
        """
        if not self.serving:
            run.close_child_fds()
            raise SandboxFault(self._failure("the session's jail is not serving"))
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", run.child_fds))]
        self._run = run
        try:
            try:
                self._status.sendmsg([f"run {cpu_ms} {wall_ms} {wall_cap_ms}".encode()], rights)
            except OSError as exc:
                raise SandboxFault(f"the session's jail is gone: {exc}") from exc
            finally:
                run.close_child_fds()  # our copies: the pipes reach EOF when the program ends
            deadline_s = wall_cap_ms / 1000 + _SESSION_GRACE_S
            done, _ = await asyncio.wait(run.waits, timeout=deadline_s)
            if len(done) < len(run.waits):
                run.stop_reason = run.stop_reason or "timeout"
                self.stop("timeout")
                await asyncio.wait(run.waits, timeout=2 * _STOP_GRACE_S)
        finally:
            self._run = None

    def end(self) -> None:
        """Tell a session's jail that no run follows: its init exits."""
        with contextlib.suppress(OSError):
            self._status.send(b"end")

    def _signal(self, signum: int) -> None:
        if self._pidfd >= 0 and not self.exited:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def stop(self, reason: str) -> None:
        """Take the jail down now: its init exits, and the kernel kills its pid namespace."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._signal(signal.SIGTERM)

    async def _settle(self, timeout_s: float) -> bool:
        waits = [self._exited, self._stdout.done, self._stderr.done]
        done, _ = await asyncio.wait(waits, timeout=timeout_s)
        return len(done) == len(waits)

    async def finish(self, deadline_s: float) -> None:
        """Wait until the jail exited and both pipes closed.

        Past ``deadline_s`` (the jail enforces the time limits itself; this is
        in case its init does not) the jail is stopped. Raises SandboxFault if
        even a SIGKILL does not end it.
        """
        if await self._settle(max(deadline_s, 0.0)):
            return
        self.stop("timeout")
        if await self._settle(_STOP_GRACE_S):
            return
        self._signal(signal.SIGKILL)
        if await self._settle(_STOP_GRACE_S):
            return
        raise SandboxFault("the jail did not stop after SIGKILL")

    # ------------------------------------------------------------------ results

    def _failure(self, what: str) -> str:
        if self.error:
            return f"{what}: {self.error}"
        tail = self._stderr.data[-500:].decode(errors="replace").strip()
        return f"{what}: the jail ended without a report" + (f" ({tail})" if tail else "")

    def fault(self) -> SandboxFault:
        """The infrastructure fault to raise when no report came back."""
        return SandboxFault(self._failure("jail failed"))

    # ------------------------------------------------------------------ cleanup

    def close(self) -> None:
        """Release every fd; a jail still running is told to stop."""
        for fd in self._child_fds:
            os.close(fd)
        self._child_fds = []
        for stream in (self._stdout, self._stderr):
            stream.close()
        if self._stdin is not None:
            self._stdin.close()
        if self._workfd is not None:
            os.close(self._workfd)
            self._workfd = None
        if self._status.fileno() >= 0:
            self._loop.remove_reader(self._status.fileno())
            self._status.close()
        if self._pidfd >= 0:
            if not self.exited:
                self.stop(self.stop_reason or "abandoned")
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1


# ---------------------------------------------------------------------- interactive


class _Channel(_Capture):
    """A pipe read as it comes: each chunk goes to ``on_data`` (``b""`` at EOF), none kept."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, on_data: Callable[[bytes], None]
    ) -> None:
        self._on_data = on_data
        super().__init__(loop, fd, 0, lambda: None)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.close()
        self._on_data(data)


class InteractiveLaunch(Launch):
    """A launch whose program talks with the worker for as long as it lives.

    Its stdin is a pipe the worker keeps open and writes requests to
    (:meth:`send`); its stdout is read as it comes and handed to ``on_data``
    (``b""`` at EOF), which must bound what it keeps; its stderr (the launcher's
    and the program's own faults) is captured up to ``stderr_cap``. The jail is
    built, limited and taken down as a :class:`Launch`'s.
    """

    def __init__(self, on_data: Callable[[bytes], None], stderr_cap: int) -> None:
        self._on_data = on_data
        self._requests = -1
        super().__init__(b"", stderr_cap)

    def _stdio(
        self, stdin: bytes, output_cap: int
    ) -> tuple[list[int], _Capture, _Capture, _Feeder | None]:
        del stdin
        in_r, self._requests = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        os.set_blocking(self._requests, False)
        channel = _Channel(self._loop, out_r, self._on_data)
        stderr = _Capture(self._loop, err_r, output_cap, lambda: None)
        return [in_r, out_w, err_w], channel, stderr, None

    @property
    def pid(self) -> int | None:
        """The host pid of the jail's init, or of its supervisor (None before it
        started or once it is reaped)."""
        if self._pidfd < 0:
            return None
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/self/fdinfo/{self._pidfd}").read_text().splitlines():
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
        return None

    async def send(self, data: bytes) -> None:
        """Write ``data`` on the program's stdin (waiting while the pipe is full).

        Raises SandboxFault when the program is gone (the pipe is closed).
        """
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._requests, view) :]
            except BlockingIOError:
                await self._writable()
            except (OSError, ValueError) as exc:
                raise SandboxFault(f"the jailed program is gone: {exc}") from exc

    async def _writable(self) -> None:
        if self._requests < 0:
            raise SandboxFault("the jailed program's stdin is closed")
        writable: asyncio.Future[None] = self._loop.create_future()
        self._loop.add_writer(self._requests, writable.set_result, None)
        try:
            await writable
        finally:
            self._loop.remove_writer(self._requests)

    def close(self) -> None:
        """Also close the program's stdin: it reads EOF."""
        if self._requests >= 0:
            self._loop.remove_writer(self._requests)
            os.close(self._requests)
            self._requests = -1
        super().close()
