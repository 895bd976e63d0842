"""The per-process layers from ``librbjail.so``, for a warm interpreter's forked children.

The launcher and this library run the same C functions, so a child forked from
a pre-started, already-confined interpreter can be confined exactly like a
fresh process::

    layers = load_layers(config)
    pid = os.fork()
    if pid == 0:
        layers.apply_cgroups(procs_fds)
        layers.apply_rlimits([(resource.RLIMIT_CPU, 3, 4)])
        layers.drop_capabilities()
        layers.apply_uid(65534, 65534)
        layers.apply_no_new_privs()
        layers.apply_seccomp()
        ...

Every method raises OSError (with the C side's reason) when the layer fails;
the caller must then exit without running the program.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

from sandbox_workers.jail.build import build
from sandbox_workers.jail.config import JailConfig

__all__ = ["LayerLibrary", "load_layers"]


class _Rlimit(ctypes.Structure):
    _fields_ = (
        ("resource", ctypes.c_int),
        ("soft", ctypes.c_ulonglong),
        ("hard", ctypes.c_ulonglong),
    )


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class LayerLibrary:
    """Typed wrappers around the ``rbjail_apply_*`` functions of ``librbjail.so``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib = ctypes.CDLL(str(path), use_errno=True)
        self._lib.rbjail_error.restype = ctypes.c_char_p
        self._lib.rbjail_seccomp_filter.restype = ctypes.c_size_t
        self._lib.rbjail_seccomp_filter.argtypes = (ctypes.c_void_p, ctypes.c_size_t)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            reason = (self._lib.rbjail_error() or b"").decode(errors="replace")
            raise OSError(err, f"{what} failed: {reason}")

    def apply_cgroups(self, procs_fds: Sequence[int]) -> None:
        """Join the cgroups whose ``cgroup.procs`` files are open as ``procs_fds``."""
        array = (ctypes.c_int * len(procs_fds))(*procs_fds)
        self._check(self._lib.rbjail_apply_cgroups(array, len(procs_fds)), "cgroups")

    def apply_cgroupns(self) -> None:
        """Enter a new cgroup namespace rooted at the current cgroup."""
        self._check(self._lib.rbjail_apply_cgroupns(), "cgroup namespace")

    def apply_rlimits(self, limits: Sequence[tuple[int, int, int]]) -> None:
        """Set (resource, soft, hard) limits; -1 means unlimited."""
        array = (_Rlimit * len(limits))(
            *(_Rlimit(res, soft & (2**64 - 1), hard & (2**64 - 1)) for res, soft, hard in limits)
        )
        self._check(self._lib.rbjail_apply_rlimits(array, len(limits)), "rlimits")

    def drop_capabilities(self) -> None:
        """Empty the capability bounding and ambient sets."""
        self._check(self._lib.rbjail_drop_capabilities(), "capabilities")

    def apply_uid(self, uid: int, gid: int) -> None:
        """Drop supplementary groups, then gid and uid (real, effective, saved)."""
        self._check(self._lib.rbjail_apply_uid(uid, gid), "uid")

    def apply_no_new_privs(self) -> None:
        """Set no_new_privs: no exec can grant privileges again."""
        self._check(self._lib.rbjail_apply_no_new_privs(), "no_new_privs")

    def apply_seccomp(self) -> None:
        """Install the jail's seccomp filter on every thread of the process."""
        self._check(self._lib.rbjail_apply_seccomp(), "seccomp")

    def seccomp_filter(self) -> list[tuple[int, int, int, int]]:
        """The seccomp filter as built, each instruction as (code, jt, jf, k): for tests."""
        buffer = (_SockFilter * 256)()
        count = self._lib.rbjail_seccomp_filter(buffer, len(buffer))
        if count == 0:
            raise OSError("the seccomp filter cannot be built")
        return [(ins.code, ins.jt, ins.jf, ins.k) for ins in buffer[:count]]

    def seccomp_denials(self) -> dict[int, int]:
        """Each syscall number the filter refuses outright, with its errno: for tests."""
        denials: dict[int, int] = {}
        nr, err = ctypes.c_int(), ctypes.c_int()
        while (
            self._lib.rbjail_seccomp_denial(len(denials), ctypes.byref(nr), ctypes.byref(err)) == 0
        ):
            denials[nr.value] = err.value
        return denials

    def reset_signals(self) -> None:
        """Default dispositions and an empty mask, as a fresh program expects."""
        self._check(self._lib.rbjail_reset_signals(), "signals")


def load_layers(config: JailConfig) -> LayerLibrary:
    """The layer library for the current C sources, compiled if needed."""
    return LayerLibrary(build(config.bin_dir).library)
