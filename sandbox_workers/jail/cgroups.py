"""Per-execution cgroups on cgroup v1 and v2: memory (+swap), pids, cpu quota, accounting.

A :class:`CgroupTree` owns one directory per worker instance and hands out
:class:`CgroupSlot` s, one per concurrent execution. Slots are reused: a
long-lived spawner process joins a slot once (via the ``cgroup.procs`` files in
:attr:`CgroupSlot.procs_files`) and every jail is forked inside it, because
moving a process into a cgroup can wait a whole RCU grace period. Resetting a
slot's counters costs a few small writes.

Counters that cannot be reset (oom kills, v2 cpu usage) are read as deltas
from a snapshot taken in :meth:`CgroupSlot.start_measuring`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CgroupLimits",
    "CgroupSlot",
    "CgroupStats",
    "CgroupTree",
    "V1Tree",
    "V2Tree",
    "detect_tree",
]

_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_V2_CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class CgroupLimits:
    """Limits of one execution; None leaves that controller alone (layer disabled)."""

    memory_bytes: int | None
    max_processes: int | None
    cpu_cores: float | None


@dataclass(frozen=True)
class CgroupStats:
    """What a slot measured since :meth:`CgroupSlot.prepare` (None: not measured)."""

    cpu_ms: float | None
    peak_memory_kb: int | None
    oom_killed: bool


class _OpenFiles:
    """A slot's per-execution counter files, kept open and re-read with pread.

    Opening and closing a cgroupfs file costs more than reading it: the open
    and close of ~7 files per execution were ~0.25 ms of the worker's CPU.
    """

    def __init__(self) -> None:
        self._fds: dict[tuple[Path, int], int] = {}

    def fd(self, path: Path, flags: int = os.O_RDONLY) -> int:
        """The kept-open fd of ``path`` (opened on first use)."""
        return self._fd(path, flags)

    def _fd(self, path: Path, flags: int) -> int:
        fd = self._fds.get((path, flags))
        if fd is None:
            fd = os.open(path, flags | os.O_CLOEXEC)
            self._fds[(path, flags)] = fd
        return fd

    def read(self, path: Path, flags: int = os.O_RDONLY) -> str:
        return os.pread(self._fd(path, flags), 4096, 0).decode("ascii")

    def write(self, path: Path, value: str, flags: int = os.O_WRONLY) -> None:
        os.pwrite(self._fd(path, flags), value.encode(), 0)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


@functools.lru_cache(maxsize=1024)
def _file(directory: Path, name: str) -> Path:
    """``directory / name``, made once: a slot reads the same few files at every
    execution, and making and hashing a new Path each time cost ~4 us a file."""
    return directory / name


def _write(path: Path, value: str, files: _OpenFiles | None = None) -> None:
    # One write() per value: cgroup files take a whole value per write call.
    if files is not None:
        files.write(path, value)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path, files: _OpenFiles | None = None) -> str:
    if files is not None:
        return files.read(path)
    with open(path, encoding="ascii") as f:
        return f.read()


def _read_int(path: Path, files: _OpenFiles | None = None) -> int | None:
    try:
        return int(_read(path, files).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path, files: _OpenFiles | None = None) -> dict[str, int]:
    """``key value`` lines (memory.events, cpu.stat, oom_control); {} if unreadable."""
    out: dict[str, int] = {}
    try:
        text = _read(path, files)
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _pids_in(procs: Path, files: _OpenFiles | None = None) -> list[int]:
    try:
        return [int(p) for p in _read(procs, files).split()]
    except (OSError, ValueError):
        return []


def _remove_dir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _kill_listed(procs_files: tuple[Path, ...], deadline_s: float = 2.0) -> None:
    """Kill every process listed until none is left (cgroup v1 has no cgroup.kill)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pids = [pid for procs in procs_files for pid in _pids_in(procs)]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)  # rare path (a slot that did not empty by itself): stay simple


class CgroupSlot(ABC):
    """One cgroup (per controller on v1) that executions run in, one at a time."""

    reusable: bool = True
    _files: _OpenFiles

    @property
    @abstractmethod
    def procs_files(self) -> tuple[Path, ...]:
        """``cgroup.procs`` files the program writes itself into."""

    @property
    @abstractmethod
    def cpu_counter(self) -> Path | None:
        """The file counting the slot's CPU time, which the jail's init enforces
        the time limit on (v1 ``cpuacct.usage``, v2 ``cpu.stat``); None without one."""

    def cpu_counter_fd(self) -> int | None:
        """:attr:`cpu_counter`, kept open (for a warm zygote's executions), or None."""
        counter = self.cpu_counter
        if counter is None:
            return None
        try:
            return self._files.fd(counter)
        except OSError:
            return None

    @abstractmethod
    def prepare(self, limits: CgroupLimits) -> None:
        """Apply an execution's limits (only those that changed are written)."""

    @abstractmethod
    def start_measuring(self) -> None:
        """Reset or snapshot the counters: the program starts now."""

    @abstractmethod
    def stats(self) -> CgroupStats:
        """Counters since :meth:`start_measuring`."""

    @abstractmethod
    def memory_bytes(self) -> int | None:
        """Memory charged to the slot now (None without a memory controller)."""

    @abstractmethod
    def pids(self) -> set[int]:
        """Processes in the slot."""

    def first_pids(self) -> frozenset[int]:
        """Processes in the slot as the first ``cgroup.procs`` lists them.

        Every hierarchy holds the same processes, so one file says it all; this
        is the cheap check run after every execution.
        """
        return frozenset(_pids_in(self.procs_files[0], self._files))

    def is_empty(self, ignore: frozenset[int] = frozenset()) -> bool:
        """No process is left in the slot but those in ``ignore``."""
        return not self.pids() - ignore

    @abstractmethod
    def kill(self) -> None:
        """Kill every process in the slot."""

    @abstractmethod
    def remove(self) -> bool:
        """Remove the cgroup directories; False while processes remain."""


class CgroupTree(ABC):
    """A worker instance's directory of slots in one cgroup hierarchy."""

    version: int
    memory: bool
    pids: bool
    cpu: bool
    # Slots have a CPU counter (CgroupSlot.cpu_counter): v1 needs cpuacct.
    cpu_accounting: bool

    @abstractmethod
    def new_slot(self) -> CgroupSlot:
        """Create a fresh slot."""

    @abstractmethod
    def close(self) -> None:
        """Remove the instance directory (slots must be removed first)."""


# ---------------------------------------------------------------------- v1


class V1Slot(CgroupSlot):
    """A slot on cgroup v1: one directory per controller hierarchy."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self._dirs = dirs
        self._unique = tuple(dict.fromkeys(dirs.values()))
        self._applied: CgroupLimits | None = None
        self._oom_before = 0
        self._baseline = 0
        self._files = _OpenFiles()

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return tuple(_file(d, "cgroup.procs") for d in self._unique)

    @property
    def cpu_counter(self) -> Path | None:
        cpuacct = self._dirs.get("cpuacct")
        return None if cpuacct is None else _file(cpuacct, "cpuacct.usage")

    def _set_memory(self, memory: Path, limit: int) -> None:
        memsw = memory / "memory.memsw.limit_in_bytes"
        mem = memory / "memory.limit_in_bytes"
        if not memsw.exists():
            _write(mem, str(limit))
            return
        # memsw (memory + swap) may never be below the memory limit: raise it
        # first when growing, lower it last when shrinking. Equal = no swap.
        current = _read_int(mem) or 0
        order = (memsw, mem) if limit > current else (mem, memsw)
        for path in order:
            _write(path, str(limit))

    def _apply(self, limits: CgroupLimits) -> None:
        old = self._applied
        memory, pids = limits.memory_bytes, limits.max_processes
        if (
            "memory" in self._dirs
            and memory is not None
            and (old is None or old.memory_bytes != memory)
        ):
            self._set_memory(self._dirs["memory"], memory)
        if "pids" in self._dirs and pids is not None and (old is None or old.max_processes != pids):
            _write(self._dirs["pids"] / "pids.max", str(pids))
        if "cpu" in self._dirs and (old is None or old.cpu_cores != limits.cpu_cores):
            quota = -1 if limits.cpu_cores is None else int(limits.cpu_cores * _CPU_PERIOD_US)
            _write(self._dirs["cpu"] / "cpu.cfs_period_us", str(_CPU_PERIOD_US))
            _write(self._dirs["cpu"] / "cpu.cfs_quota_us", str(quota))
        self._applied = limits

    def prepare(self, limits: CgroupLimits) -> None:
        self._apply(limits)

    def start_measuring(self) -> None:
        if "memory" in self._dirs:
            memory = self._dirs["memory"]
            _write(_file(memory, "memory.max_usage_in_bytes"), "0", self._files)  # to current usage
            # Page cache earlier runs left charged here is not this run's. (Forcing it
            # out with memory.force_empty would evict shared files, e.g. the Python
            # stdlib, from the page cache for everyone: measured 4-5 ms per run.)
            self._baseline = _read_int(_file(memory, "memory.usage_in_bytes"), self._files) or 0
            oom = _read_keyed(_file(memory, "memory.oom_control"), self._files)
            self._oom_before = oom.get("oom_kill", 0)
        if "cpuacct" in self._dirs:
            _write(_file(self._dirs["cpuacct"], "cpuacct.usage"), "0", self._files)

    def stats(self) -> CgroupStats:
        cpu_ms = peak_kb = None
        oom = False
        if "cpuacct" in self._dirs:
            usage_ns = _read_int(_file(self._dirs["cpuacct"], "cpuacct.usage"), self._files)
            cpu_ms = None if usage_ns is None else usage_ns / 1e6
        if "memory" in self._dirs:
            memory = self._dirs["memory"]
            peak = _read_int(_file(memory, "memory.max_usage_in_bytes"), self._files)
            peak_kb = None if peak is None else max(peak - self._baseline, 0) // 1024
            events = _read_keyed(_file(memory, "memory.oom_control"), self._files)
            oom = events.get("oom_kill", 0) > self._oom_before
        return CgroupStats(cpu_ms=cpu_ms, peak_memory_kb=peak_kb, oom_killed=oom)

    def memory_bytes(self) -> int | None:
        if "memory" not in self._dirs:
            return None
        return _read_int(_file(self._dirs["memory"], "memory.usage_in_bytes"), self._files)

    def pids(self) -> set[int]:
        return {pid for procs in self.procs_files for pid in _pids_in(procs, self._files)}

    def kill(self) -> None:
        _kill_listed(self.procs_files)

    def remove(self) -> bool:
        self._files.close()
        return all([_remove_dir(d) for d in self._unique])


class V1Tree(CgroupTree):
    """Slots below ``<controller mount>/<own cgroup>/<parent>/w<pid>-<n>`` per controller."""

    version = 1

    def __init__(self, bases: dict[str, Path], instance: str) -> None:
        self._instance = {c: base / instance for c, base in bases.items()}
        for path in dict.fromkeys(self._instance.values()):
            path.mkdir(parents=True, exist_ok=True)
        self.memory = "memory" in bases
        self.pids = "pids" in bases
        self.cpu = "cpu" in bases
        self.cpu_accounting = "cpuacct" in bases
        self._count = 0

    def new_slot(self) -> CgroupSlot:
        self._count += 1
        dirs = {c: inst / f"s{self._count}" for c, inst in self._instance.items()}
        for path in dict.fromkeys(dirs.values()):
            path.mkdir(exist_ok=True)
        return V1Slot(dirs)

    def close(self) -> None:
        for path in dict.fromkeys(self._instance.values()):
            _remove_dir(path)


# ---------------------------------------------------------------------- v2


class V2Slot(CgroupSlot):
    """A slot on cgroup v2: one directory with every enabled controller."""

    def __init__(self, path: Path, controllers: frozenset[str]) -> None:
        self.path = path
        self._controllers = controllers
        self._applied: CgroupLimits | None = None
        self._oom_before = 0
        self._cpu_before = 0
        self._baseline = 0
        self._files = _OpenFiles()

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return (_file(self.path, "cgroup.procs"),)

    @property
    def cpu_counter(self) -> Path | None:
        # usage_usec is in every v2 cgroup's cpu.stat, cpu controller or not.
        return _file(self.path, "cpu.stat")

    def _apply(self, limits: CgroupLimits) -> None:
        old, on = self._applied, self._controllers
        memory, pids = limits.memory_bytes, limits.max_processes
        if "memory" in on and memory is not None and (old is None or old.memory_bytes != memory):
            _write(self.path / "memory.max", str(memory))
            if (self.path / "memory.swap.max").exists():  # absent without swap accounting
                _write(self.path / "memory.swap.max", "0")
            # An OOM kills the whole execution, not one random process of it.
            _write(self.path / "memory.oom.group", "1")
        if "pids" in on and pids is not None and (old is None or old.max_processes != pids):
            _write(self.path / "pids.max", str(pids))
        if "cpu" in on and (old is None or old.cpu_cores != limits.cpu_cores):
            cores = limits.cpu_cores
            quota = "max" if cores is None else str(int(cores * _CPU_PERIOD_US))
            _write(self.path / "cpu.max", f"{quota} {_CPU_PERIOD_US}")
        self._applied = limits

    def _reset_peak(self) -> None:
        # Since Linux 6.12 a write to memory.peak resets the peak seen through
        # that same open file (so reads go through it too, with the same flags).
        # Without it the slot measures one execution only.
        try:
            self._files.write(_file(self.path, "memory.peak"), "reset\n", os.O_RDWR)
        except OSError:
            self.reusable = False

    def prepare(self, limits: CgroupLimits) -> None:
        self._apply(limits)

    def start_measuring(self) -> None:
        if "memory" in self._controllers:
            self._reset_peak()
        self._baseline = _read_int(_file(self.path, "memory.current"), self._files) or 0
        self._oom_before = _read_keyed(_file(self.path, "memory.events"), self._files).get(
            "oom_kill", 0
        )
        self._cpu_before = _read_keyed(_file(self.path, "cpu.stat"), self._files).get(
            "usage_usec", 0
        )

    def _peak(self) -> int | None:
        if "memory" not in self._controllers:
            return None
        try:
            return int(self._files.read(_file(self.path, "memory.peak"), os.O_RDWR).split()[0])
        except (OSError, ValueError, IndexError):
            return _read_int(_file(self.path, "memory.peak"))

    def stats(self) -> CgroupStats:
        usage = _read_keyed(_file(self.path, "cpu.stat"), self._files).get("usage_usec")
        events = _read_keyed(_file(self.path, "memory.events"), self._files)
        peak = self._peak()
        return CgroupStats(
            cpu_ms=None if usage is None else (usage - self._cpu_before) / 1000,
            peak_memory_kb=None if peak is None else max(peak - self._baseline, 0) // 1024,
            oom_killed=events.get("oom_kill", 0) > self._oom_before,
        )

    def memory_bytes(self) -> int | None:
        if "memory" not in self._controllers:
            return None
        return _read_int(_file(self.path, "memory.current"), self._files)

    def pids(self) -> set[int]:
        return set(_pids_in(_file(self.path, "cgroup.procs"), self._files))

    def is_empty(self, ignore: frozenset[int] = frozenset()) -> bool:
        if not ignore:  # cgroup.events counts descendants too, without a pid read
            events = _read_keyed(_file(self.path, "cgroup.events"), self._files)
            populated = events.get("populated")
            if populated is not None:
                return populated == 0
        return super().is_empty(ignore)

    def kill(self) -> None:
        try:
            _write(self.path / "cgroup.kill", "1")  # Linux 5.14+: the kernel kills them all
        except OSError:
            _kill_listed(self.procs_files)

    def remove(self) -> bool:
        self._files.close()
        return _remove_dir(self.path)


def _enable_controllers(path: Path, wanted: tuple[str, ...]) -> None:
    try:
        available = set(_read(path / "cgroup.controllers").split())
    except OSError:
        available = set(wanted)
    for name in wanted:
        if name in available:
            with contextlib.suppress(OSError):
                _write(path / "cgroup.subtree_control", f"+{name}")


class V2Tree(CgroupTree):
    """Slots below ``<base>/w<pid>-<n>`` on the unified hierarchy.

    Processes may only live in leaves once controllers are enabled below a
    cgroup, so ``base`` must not hold processes itself (it is our own dir).
    """

    version = 2
    cpu_accounting = True  # cpu.stat's usage_usec, with or without the cpu controller

    def __init__(self, base: Path, instance: str) -> None:
        base.mkdir(parents=True, exist_ok=True)
        available = self._controllers(base)
        if not set(_V2_CONTROLLERS) <= available:
            # The parent has to pass the controllers down; it may be ours to ask.
            _enable_controllers(base.parent, _V2_CONTROLLERS)
            available = self._controllers(base)
        self.memory = "memory" in available
        self.pids = "pids" in available
        self.cpu = "cpu" in available
        _enable_controllers(base, _V2_CONTROLLERS)
        self._instance = base / instance
        self._instance.mkdir(exist_ok=True)
        _enable_controllers(self._instance, _V2_CONTROLLERS)
        self._count = 0

    @staticmethod
    def _controllers(path: Path) -> set[str]:
        try:
            return set(_read(path / "cgroup.controllers").split())
        except OSError:
            return set()

    def new_slot(self) -> CgroupSlot:
        self._count += 1
        path = self._instance / f"s{self._count}"
        path.mkdir(exist_ok=True)
        on = {"memory": self.memory, "pids": self.pids, "cpu": self.cpu}
        return V2Slot(path, frozenset(name for name, enabled in on.items() if enabled))

    def close(self) -> None:
        _remove_dir(self._instance)


# ---------------------------------------------------------------------- detection


@dataclass(frozen=True)
class _Mount:
    path: Path
    fstype: str
    options: frozenset[str]


def _cgroup_mounts(mountinfo: str) -> list[_Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        path = Path(fields[4].replace("\\040", " "))
        mounts.append(_Mount(path, rest[0], frozenset(rest[2].split(","))))
    return mounts


def _own_cgroups(proc_cgroup: str) -> dict[str, str]:
    """Controller (or "" for the unified hierarchy) -> this process's cgroup path."""
    own: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                own[name] = parts[2]
    return own


_instances = itertools.count(1)


def _unique_instance() -> str:
    # pid + counter: unique among live workers and among trees of one worker.
    return f"w{os.getpid()}-{next(_instances)}"


def _sweep_stale(base: Path) -> None:
    """Remove instance dirs left by workers that died (best effort, empty cgroups only)."""
    if not base.is_dir():
        return
    for inst in base.glob("w*-*"):
        try:
            pid = int(inst.name[1:].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or Path(f"/proc/{pid}").exists():
            continue
        for slot in inst.glob("s*"):
            _remove_dir(slot)
        _remove_dir(inst)


def _v1_tree(mounts: list[_Mount], own: dict[str, str], parent: str) -> CgroupTree | None:
    bases: dict[str, Path] = {}
    for controller in _V1_CONTROLLERS:
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        if mount is None:
            continue
        own_path = own.get(controller, "/").lstrip("/")
        bases[controller] = mount.path / own_path / parent
    if "memory" not in bases and "pids" not in bases:
        return None
    for base in dict.fromkeys(bases.values()):
        _sweep_stale(base)
    return V1Tree(bases, _unique_instance())


def _v2_base(mount: Path, own: str, parent: str) -> Path:
    if own in ("", "/"):
        return mount / parent
    # Next to our own cgroup: v2 forbids processes in a cgroup whose controllers
    # are handed down, and the worker itself lives in its own cgroup.
    return mount / own.lstrip("/") / ".." / parent


def detect_tree(
    parent: str,
    cgroup_root: Path | None = None,
    *,
    mountinfo: str | None = None,
    proc_cgroup: str | None = None,
) -> CgroupTree | None:
    """The cgroup hierarchy this host offers, set up for a new worker instance.

    Raises OSError when a hierarchy exists but cannot be written.
    """
    if cgroup_root is not None:
        _sweep_stale(cgroup_root)
        return V2Tree(cgroup_root, _unique_instance())
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    mounts = _cgroup_mounts(mountinfo)
    own = _own_cgroups(proc_cgroup)
    unified = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if unified is not None and (unified.path / "cgroup.controllers").exists():
        controllers = set(_read(unified.path / "cgroup.controllers").split())
        if controllers & {"memory", "pids"}:
            base = Path(os.path.normpath(_v2_base(unified.path, own.get("", "/"), parent)))
            _sweep_stale(base)
            return V2Tree(base, _unique_instance())
    return _v1_tree(mounts, own, parent)
