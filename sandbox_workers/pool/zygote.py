"""One warm interpreter, resident in its own jail and cgroup slot (worker side).

Starting one: the slot's ``rbjail --spawner`` forks the init of a jail built
exactly as for a cold execution, except that its program (the zygote,
:mod:`.zygote_main`) keeps root and has no seccomp filter: it must create
namespaces and mounts for its children, and it runs no untrusted code. The
zygote gets the layer library as an fd (nothing of the worker's is mounted),
preloads modules and says ``ready``.

Running one execution: :meth:`Zygote.load` packs an :class:`ExecutionSpec`
(``struct rbjail_pool_request``, the command line, then the interpreter's part
as JSON); :class:`Zygote` then stands where a slot's spawner would for
:class:`~sandbox_workers.jail.process.Launch`: its :meth:`Zygote.spawn`
hands the zygote the execution's stdio and status socket plus a memfd with the
request (and the slot's cgroup CPU counter, on which pid 1 enforces the CPU
time limit), and answers with a pidfd of the execution's pid 1, which speaks the
launcher's status protocol ("ready" + fd of /work, "go", "result ..."), so the
cold and the warm path share everything from there on: file placement, output
capture, time limits, cgroup accounting, result parsing.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import ctypes
import marshal
import os
import resource
import select
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from sandbox_workers.pool.profile import Profile
from sandbox_workers.pool.slot import JailSpawner, SlotCgroup
from sandbox_workers.sandbox import SandboxFault

__all__ = ["ExecutionSpec", "Zygote", "ZygoteFault", "ZygoteInfo"]

_MAX_FDS = 4
_STDERR_TAIL = 2000
_MAX_RLIMITS = 16  # RBJAIL_POOL_MAX_RLIMITS

# The jail's own cgroup slot type: what the jail gets back from ``Zygote.cgroup``.
_Cgroup = TypeVar("_Cgroup", bound=SlotCgroup)


class _Rlimit(ctypes.Structure):
    _fields_ = (
        ("resource", ctypes.c_int),
        ("soft", ctypes.c_ulonglong),
        ("hard", ctypes.c_ulonglong),
    )


class _RequestHead(ctypes.Structure):
    """struct rbjail_pool_request (the C side refuses a head of another size)."""

    _fields_ = (
        ("size", ctypes.c_uint),
        ("cmdline_len", ctypes.c_uint),
        ("drop_uid", ctypes.c_int),
        ("seccomp", ctypes.c_int),
        ("loopback", ctypes.c_int),
        ("uid", ctypes.c_uint),
        ("gid", ctypes.c_uint),
        ("cpu_ms", ctypes.c_longlong),
        ("wall_ms", ctypes.c_longlong),
        ("wall_cap_ms", ctypes.c_longlong),
        ("work_mb", ctypes.c_ulong),
        ("tmp_mb", ctypes.c_ulong),
        ("inodes", ctypes.c_ulong),
        ("n_rlimits", ctypes.c_uint),
        ("rlimits", _Rlimit * _MAX_RLIMITS),
    )


@dataclass(frozen=True)
class ExecutionSpec:
    """One execution for a zygote: its confinement, its command line, its ``-c`` code.

    ``cpu_ms`` is the CPU time limit of the whole execution, ``wall_ms`` its
    wall-clock backstop and ``wall_cap_ms`` the most wall time it may take
    (see :mod:`sandbox_workers.jail`).
    """

    argv: tuple[str, ...]
    code: str
    args: tuple[str, ...]
    cpu_ms: int
    wall_ms: int
    wall_cap_ms: int
    work_mb: int
    tmp_mb: int
    inodes: int
    uid: int
    gid: int
    drop_uid: bool
    seccomp: bool
    loopback: bool
    rlimits: tuple[tuple[str, int, int], ...] = ()
    shadow: tuple[str, ...] = ()

    def pack(self) -> bytes:
        """The request memfd's content."""
        if len(self.rlimits) > _MAX_RLIMITS:
            raise ValueError(f"at most {_MAX_RLIMITS} rlimits")
        cmdline = b"".join(arg.encode() + b"\0" for arg in self.argv)
        head = _RequestHead(
            size=ctypes.sizeof(_RequestHead),
            cmdline_len=len(cmdline),
            drop_uid=int(self.drop_uid),
            seccomp=int(self.seccomp),
            loopback=int(self.loopback),
            uid=self.uid,
            gid=self.gid,
            cpu_ms=self.cpu_ms,
            wall_ms=self.wall_ms,
            wall_cap_ms=self.wall_cap_ms,
            work_mb=self.work_mb,
            tmp_mb=self.tmp_mb,
            inodes=self.inodes,
            n_rlimits=len(self.rlimits),
        )
        for i, (name, soft, hard) in enumerate(self.rlimits):
            number = getattr(resource, f"RLIMIT_{name.upper()}")
            head.rlimits[i] = _Rlimit(number, soft & (2**64 - 1), hard & (2**64 - 1))
        interpreter = {
            "code": self.code,
            "args": list(self.args),
            "argv": list(self.argv),
            "shadow": list(self.shadow),
        }
        # marshal: the zygote runs this interpreter's version (the pooled one).
        return bytes(head) + cmdline + marshal.dumps(interpreter)


class ZygoteFault(SandboxFault):
    """A zygote failed (not the program): it is discarded; the request can still run cold."""


@dataclass(frozen=True)
class ZygoteInfo:
    """The zygote's footprint once warm, as it reported it."""

    rss_kb: int
    anon_kb: int
    vsz_kb: int


def _recv(sock: socket.socket) -> tuple[bytes, list[int]]:
    msg, ancdata, _, _ = sock.recvmsg(
        4096, socket.CMSG_SPACE(4 * _MAX_FDS), socket.MSG_CMSG_CLOEXEC
    )
    fds = [
        fd
        for level, kind, data in ancdata
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
        for fd in array.array("i", data[: len(data) - len(data) % 4])
    ]
    return msg, fds


async def _receive(sock: socket.socket, timeout_s: float, what: str) -> tuple[str, list[int]]:
    """The next message on a non-blocking SOCK_SEQPACKET socket; b"" once the peer is gone."""
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[tuple[bytes, list[int]]] = loop.create_future()
    fd = sock.fileno()

    def readable() -> None:
        try:
            result = _recv(sock)
        except BlockingIOError:
            return
        except OSError:
            result = (b"", [])
        loop.remove_reader(fd)
        if reply.done():
            for got in result[1]:
                os.close(got)
        else:
            reply.set_result(result)

    loop.add_reader(fd, readable)
    try:
        msg, fds = await asyncio.wait_for(reply, timeout_s)
    except TimeoutError:
        raise ZygoteFault(f"no {what} from the zygote within {timeout_s:.1f} s") from None
    finally:
        loop.remove_reader(fd)
    return msg.decode(errors="replace"), fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        os.close(fd)


def _pid_of(pidfd: int) -> int:
    """The pid (in our namespace) a pidfd refers to."""
    with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    return -1


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _parse_ready(text: str) -> ZygoteInfo:
    fields = dict(item.split("=", 1) for item in text.split()[1:])
    return ZygoteInfo(
        rss_kb=int(fields["rss_kb"]), anon_kb=int(fields["anon_kb"]), vsz_kb=int(fields["vsz_kb"])
    )


class Zygote(Generic[_Cgroup]):
    """A warm interpreter serving one execution at a time (see the module docstring).

    Built by :meth:`start`. ``release`` is called once when the zygote is
    closed (or fails to start): it takes the slot down, which kills the
    zygote's whole jail, and removes or recycles its cgroups.
    """

    def __init__(
        self,
        *,
        profile: Profile,
        control: socket.socket,
        status: socket.socket,
        pidfd: int,
        info: ZygoteInfo,
        cgroup: _Cgroup | None,
        release: Callable[[], None],
        timeout_s: float,
    ) -> None:
        # The zygote is already running when this object is made (see start()).
        self.profile = profile
        self.info = info
        self.cgroup = cgroup
        self.pid = _pid_of(pidfd)
        self.uses = 0
        self._control = control
        self._status = status
        self._pidfd = pidfd
        self._release = release
        self._timeout_s = timeout_s
        self._closed = False
        self._loaded: bytes | None = None
        self._counter: int | None = None
        # Everything in the slot while the zygote idles: after an execution the
        # slot must hold exactly these again.
        self.resident = frozenset(cgroup.pids()) if cgroup is not None else frozenset({self.pid})

    # ------------------------------------------------------------------ start

    @classmethod
    async def start(
        cls,
        *,
        profile: Profile,
        spawner: JailSpawner,
        cgroup: _Cgroup | None,
        release: Callable[[], None],
        options: Sequence[str],
        library: Path,
        wait_go: bool,
        timeout_s: float,
    ) -> Zygote[_Cgroup]:
        """Start a zygote in the slot of ``spawner``; ZygoteFault if it does not come up."""
        control, control_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status, status_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        err_r, err_w = os.pipe()
        pidfd = -1
        try:
            for sock in (control, status):
                sock.setblocking(False)
            os.set_blocking(err_r, False)
            # stdout and stderr are a pipe, as an execution's are: the streams the
            # interpreter makes for them at start-up are the ones a fresh start would.
            try:
                fds = [control_theirs.fileno(), err_w, err_w, status_theirs.fileno()]
                pidfd = await spawner.spawn(options, fds)
            finally:
                os.close(err_w)
                control_theirs.close()
                status_theirs.close()
            info = await cls._handshake(
                control=control,
                status=status,
                err_r=err_r,
                library=library,
                wait_go=wait_go,
                timeout_s=timeout_s,
            )
            zygote = cls(
                profile=profile,
                control=control,
                status=status,
                pidfd=pidfd,
                info=info,
                cgroup=cgroup,
                release=release,
                timeout_s=timeout_s,
            )
        except BaseException:
            control.close()
            status.close()
            if pidfd >= 0:
                os.close(pidfd)
            release()
            raise
        finally:
            os.close(err_r)
        return zygote

    @staticmethod
    async def _handshake(
        *,
        control: socket.socket,
        status: socket.socket,
        err_r: int,
        library: Path,
        wait_go: bool,
        timeout_s: float,
    ) -> ZygoteInfo:
        text, fds = await _receive(status, timeout_s, "jail")
        _close_all(fds)  # the zygote's own /work: nothing to place there
        if text != "ready":
            raise ZygoteFault(f"the zygote's jail failed: {text or 'it exited'}")
        if wait_go:
            status.send(b"go")
        # The layer library goes in as an fd: nothing of ours is mounted in the jail.
        libfd = os.open(library, os.O_RDONLY | os.O_CLOEXEC)
        try:
            rights = array.array("i", [libfd])
            control.sendmsg([b"library"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        finally:
            os.close(libfd)
        text, fds = await _receive(control, timeout_s, "ready")
        _close_all(fds)
        if not text.startswith("ready "):
            try:
                tail = os.read(err_r, 1 << 16).decode(errors="replace")[-_STDERR_TAIL:].strip()
            except BlockingIOError:
                tail = ""
            raise ZygoteFault(f"the zygote did not start: {text or 'it exited'} {tail}".strip())
        return _parse_ready(text)

    # ------------------------------------------------------------------ executions

    @property
    def alive(self) -> bool:
        """False once the zygote's jail has ended (or :meth:`close` was called)."""
        return not self._closed and not _readable(self._pidfd)

    def healthy(self) -> bool:
        """Alive, and its slot holds exactly what it held while idle (nothing left over)."""
        if not self.alive:
            return False
        if self.cgroup is None:
            return True
        return self.cgroup.reusable and self.cgroup.first_pids() == self.resident

    def load(self, spec: ExecutionSpec, *, cpu_counter: int | None = None) -> None:
        """The execution the next :meth:`spawn` starts.

        ``cpu_counter``: an open fd of the slot's cgroup CPU counter, on which
        the execution's pid 1 enforces the CPU time limit (None: it falls back
        to per-process clocks).
        """
        self._loaded = spec.pack()
        self._counter = cpu_counter

    async def spawn(self, options: Sequence[str], fds: Sequence[int]) -> int:
        """Fork the loaded execution with stdio/status ``fds``; returns its pid 1's pidfd.

        ``options`` must be empty: everything is in the loaded :class:`ExecutionSpec`.
        """
        payload, self._loaded = self._loaded, None
        if self._closed:
            raise ZygoteFault("the zygote is closed")
        if payload is None or options:
            raise ValueError("load() an ExecutionSpec before each spawn(); no options")
        memfd = os.memfd_create("rbpool-request", os.MFD_CLOEXEC)
        counter, self._counter = self._counter, None
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(memfd, view) :]
            extra = [] if counter is None else [counter]
            rights = array.array("i", [*fds, memfd, *extra])
            self._control.sendmsg([b"spawn"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        except OSError as exc:
            raise ZygoteFault(f"the zygote is gone: {exc}") from exc
        finally:
            os.close(memfd)
        text, got = await _receive(self._control, self._timeout_s, "spawn reply")
        if not text.startswith("spawned ") or len(got) != 1:
            _close_all(got)
            raise ZygoteFault(f"the zygote failed: {text or 'it exited'}")
        self.uses += 1
        return got[0]

    def close(self) -> None:
        """Take the zygote down with its jail and hand its slot back."""
        if self._closed:
            return
        self._closed = True
        self._control.close()  # the zygote sees EOF, should it outlive what follows
        self._status.close()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        self._release()
