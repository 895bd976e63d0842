"""One running launcher, driven by the event loop: no threads, no timers polling.

The launcher is started with ``posix_spawn`` (vfork-fast, argv only, empty
environment) and watched through file descriptors the loop already multiplexes:
a pidfd for its exit, the stdout/stderr pipes (read with a cap), the stdin pipe
(written as the program reads) and a SOCK_SEQPACKET status socket over which the
jail's init reports "ready" (with an fd of /work), "result ..." or "error ...".
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sandbox_workers.sandbox import SandboxFault

__all__ = ["JailReport", "Launch"]

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
# After a stop request the launcher has this long to take its jail down before
# it is SIGKILLed (its init then dies through PR_SET_PDEATHSIG).
_STOP_GRACE_S = 2.0
_LAUNCHER_FAULT = 125


@dataclass(frozen=True)
class JailReport:
    """What the jail's init measured: the program's status and resource use."""

    exit_code: int | None
    signal: int | None
    wall_ms: float
    cpu_ms: float
    maxrss_kb: int
    timed_out: bool


def _parse_report(text: str) -> JailReport:
    fields = dict(item.split("=", 1) for item in text.split()[1:])
    exit_code = int(fields["exit"])
    signum = int(fields["signal"])
    return JailReport(
        exit_code=None if exit_code < 0 else exit_code,
        signal=signum or None,
        wall_ms=int(fields["wall_us"]) / 1000,
        cpu_ms=(int(fields["utime_us"]) + int(fields["stime_us"])) / 1000,
        maxrss_kb=int(fields["maxrss_kb"]),
        timed_out=fields["timed_out"] == "1",
    )


def _high_fd(fd: int) -> int:
    """Move fd above 3 so the spawn's dup2 onto 0-3 never clobbers a source."""
    if fd > 3:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 4)
    os.close(fd)
    return new


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
        os.set_blocking(fd, False)
        self._writable(first=True)

    def _writable(self, first: bool = False) -> None:
        try:
            while self._view:
                written = os.write(self._fd, self._view)
                self._view = self._view[written:]
        except BlockingIOError:
            if first:
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


class Launch:
    """A started launcher: the caller awaits :meth:`ready`, then :meth:`finish`."""

    def __init__(self, argv: Sequence[str], stdin: bytes, output_cap: int) -> None:
        self._loop = asyncio.get_running_loop()
        self.report: JailReport | None = None
        self.error: str | None = None
        self.stop_reason: str | None = None
        self.returncode: int | None = None
        self._workfd: int | None = None
        self._ready = asyncio.Event()
        self._exited: asyncio.Future[None] = self._loop.create_future()
        self.pid = -1
        self._spawn(argv, stdin, output_cap)

    # ------------------------------------------------------------------ start

    def _spawn(self, argv: Sequence[str], stdin: bytes, output_cap: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        if stdin:
            in_r, in_w = os.pipe()
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
        child = [_high_fd(fd) for fd in (in_r, out_w, err_w, theirs.detach())]
        try:
            self.pid = os.posix_spawn(
                argv[0],
                list(argv),
                {},
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(child)],
                setpgroup=0,  # the terminal's ^C is for the worker, which drains
                setsigmask=(),
                setsigdef=_RESET_SIGNALS,
            )
        except OSError as exc:
            for fd in (out_r, err_r, in_w):
                if fd >= 0:
                    os.close(fd)
            ours.close()
            raise SandboxFault(f"cannot start the jail launcher: {exc}") from exc
        finally:
            for fd in child:
                os.close(fd)
        self._pidfd = os.pidfd_open(self.pid)
        self._loop.add_reader(self._pidfd, self._on_exit)
        self._status = ours
        ours.setblocking(False)
        self._loop.add_reader(ours.fileno(), self._on_status)
        self._stdout = _Capture(self._loop, out_r, output_cap, lambda: self.stop("output"))
        self._stderr = _Capture(self._loop, err_r, output_cap, lambda: self.stop("output"))
        self._stdin = _Feeder(self._loop, in_w, stdin) if in_w >= 0 else None

    # ------------------------------------------------------------------ events

    def _on_exit(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, -1  # a stray waitpid(-1) elsewhere reaped it: status unknown
        if pid == 0:
            return  # not exited after all
        self._loop.remove_reader(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status) if status >= 0 else -1
        self._drain_status()
        if not self._exited.done():
            self._exited.set_result(None)
        self._ready.set()

    def _on_status(self) -> None:
        self._drain_status()

    def _drain_status(self) -> None:
        if self._status.fileno() < 0:
            return
        while True:
            try:
                msg, ancdata, _, _ = self._status.recvmsg(4096, socket.CMSG_SPACE(4))
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                msg, ancdata = b"", []
            fds = [
                fd
                for level, kind, data in ancdata
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                for fd in array.array("i", data[: len(data) - len(data) % 4])
            ]
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
            self.report = _parse_report(text)
        elif text.startswith("error "):
            self.error = text[len("error ") :]
            self._ready.set()
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
        """Let the program start (the launcher was told to wait for this)."""
        with contextlib.suppress(OSError):
            self._status.send(b"go")

    def stop(self, reason: str) -> None:
        """Take the jail down now: the launcher SIGKILLs its pid namespace."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    async def _settle(self, timeout_s: float) -> bool:
        waits = [self._exited, self._stdout.done, self._stderr.done]
        done, _ = await asyncio.wait(waits, timeout=timeout_s)
        return len(done) == len(waits)

    async def finish(self, deadline_s: float) -> None:
        """Wait until the launcher exited and both pipes closed.

        Past ``deadline_s`` (the jail enforces the real time limit itself; this
        is the backstop) the jail is stopped. Raises SandboxFault if even a
        SIGKILL does not end it.
        """
        if await self._settle(max(deadline_s, 0.0)):
            return
        self.stop("timeout")
        if await self._settle(_STOP_GRACE_S):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if await self._settle(_STOP_GRACE_S):
            return
        raise SandboxFault("the jail did not stop after SIGKILL")

    # ------------------------------------------------------------------ results

    @property
    def stdout(self) -> bytes:
        return self._stdout.data

    @property
    def stderr(self) -> bytes:
        return self._stderr.data

    @property
    def output_exceeded(self) -> bool:
        return self._stdout.exceeded or self._stderr.exceeded

    def _failure(self, what: str) -> str:
        if self.error:
            return f"{what}: {self.error}"
        tail = self._stderr.data[-500:].decode(errors="replace").strip()
        return f"{what}: launcher exited with {self.returncode}" + (f" ({tail})" if tail else "")

    def fault(self) -> SandboxFault:
        """The infrastructure fault to raise when no report came back."""
        return SandboxFault(self._failure("jail failed"))

    # ------------------------------------------------------------------ cleanup

    def close(self) -> None:
        """Release every fd; a launcher still running is stopped and reaped later."""
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
        if self.returncode is None:
            self.stop(self.stop_reason or "abandoned")
            # The pidfd reader stays registered: _on_exit reaps it when it ends.
            self._exited.add_done_callback(lambda _: os.close(self._pidfd))
        else:
            os.close(self._pidfd)


def monotonic_ms() -> float:
    """Milliseconds on the monotonic clock (wall time measured on the worker side)."""
    return time.monotonic() * 1000
