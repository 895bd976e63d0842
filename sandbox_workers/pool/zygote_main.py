"""The warm-pool zygote: a pre-started interpreter that forks one isolated execution at a time.

This file is the ``-c`` program of a zygote's interpreter, run inside a jail
(its own pid, mount, net, ipc and uts namespaces, a private read-only root, a
cgroup slot) as root, never running untrusted code itself. The worker never
imports it (standard library only, like the judging harness). The interpreter
is started with exactly the options and environment of the executions it
serves, so ``sys.flags``, ``sys.path``, the hash seed and the standard streams'
encodings are what a fresh ``python <options> -c`` gets.

Once warm (modules preloaded, heap frozen) it hands over to the C serving loop
in ``librbjail.so`` (``rbjail_zygote_serve``, the launcher's own layer and init
code), which never touches the Python heap. Per execution (worker side:
:mod:`sandbox_workers.pool.zygote`)::

    zygote   gets "spawn" + [stdin, stdout, stderr, status socket, request memfd,
             the slot's cgroup CPU counter if any] on its control socket
             (fd 0). It never reads the request: no execution's data ever
             sits in the memory later executions inherit.
             It unshares mount and ipc (and net) namespaces and a pid namespace
             for its next child, forks the execution's pid 1, re-enters its own
             namespaces and answers "spawned PID" + [pidfd of that pid 1].
    pid 1    root in the new namespaces, in C: reads the request's head, mounts
             a fresh /work, /tmp, /dev/shm and /proc, forks the program ahead
             (it waits for "go"), then runs the launcher's init: "ready" + fd of
             /work, waits for "go", lets the program start, enforces the CPU
             time limit (on the counter) and the wall-clock backstop, kills
             every process left and reports "result ...".
    program  pid 2: waits for "go", takes the execution's stdio, shows the
             request's argv as its command line, is confined (rbjail_confine:
             rlimits, capabilities, uid, no_new_privs, seccomp) and closes every
             other fd, all in C; then returns here, where CPython's after-fork
             hooks run, __main__ (and stdin, if it is /dev/null) are made afresh
             and the -c code runs at this file's module level (see the bottom).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import gc
import importlib
import io
import json
import marshal
import os
import signal
import socket
import sys
import types
import weakref
from typing import Any, NoReturn

_JAIL_FAULT = 125
_NAMESPACES = ("mnt", "pid", "ipc")
# Where an execution finds the code objects this zygote keeps (see _keep_code).
_KEPT_MODULE = "_rewardbus_kept"
# The -c commands compiled before forking (PoolConfig.precompile), by their source.
_PRECOMPILED: dict[str, types.CodeType] = {}


class _ZygoteSpec(ctypes.Structure):
    """struct rbjail_zygote."""

    _fields_ = (
        ("control_fd", ctypes.c_int),
        ("ns_fds", ctypes.POINTER(ctypes.c_int)),
        ("n_ns_fds", ctypes.c_size_t),
        ("fresh_net", ctypes.c_int),
        ("loopback", ctypes.c_int),
    )


class _Fault(Exception):
    """An infrastructure failure before the program ran: reported as "error STAGE: ..."."""

    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")


def _load_library(control: socket.socket) -> ctypes.CDLL:
    """librbjail.so, from an fd the worker passes first (nothing of ours is mounted)."""
    msg, ancdata, _, _ = control.recvmsg(64, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC)
    fds = [
        fd
        for level, kind, data in ancdata
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
        for fd in array.array("i", data[: len(data) - len(data) % 4])
    ]
    if msg != b"library" or len(fds) != 1:
        raise SystemExit("zygote: expected the layer library first")
    lib = ctypes.CDLL(f"/proc/self/fd/{fds[0]}", use_errno=True)
    os.close(fds[0])
    lib.rbjail_struct_size.restype = ctypes.c_size_t
    lib.rbjail_struct_size.argtypes = (ctypes.c_char_p,)
    if lib.rbjail_struct_size(b"zygote") != ctypes.sizeof(_ZygoteSpec):
        raise SystemExit("zygote: struct rbjail_zygote does not match its mirror")
    return lib


def _status_kb(*keys: str) -> dict[str, int]:
    found: dict[str, int] = {}
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in keys:
                found[key] = int(value.split()[0])
    return found


def main() -> _Program:
    """Warm up, then serve executions until the worker closes the control socket.

    Returns only in an execution's program, confined and ready to run (see the
    bottom of this file); the zygote itself and every pid 1 end with _exit.
    """
    config: dict[str, Any] = json.loads(sys.argv[1])
    control = socket.socket(fileno=0)
    lib = _load_library(control)
    # Never the OOM killer's victim (cgroup v2 oom.group spares -1000 too): the
    # program resets its own score to 0, as the launcher's programs do. Best
    # effort, as for the launcher's spawner: it needs CAP_SYS_RESOURCE.
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"-1000")
        finally:
            os.close(fd)
    for name in config["preload"]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    _keep_code(config["keep_code"])
    _precompile(config["precompile"])
    fresh_net = bool(config["fresh_net"])
    namespaces = list(_NAMESPACES) + (["net"] if fresh_net else [])
    own = [os.open(f"/proc/self/ns/{ns}", os.O_RDONLY | os.O_CLOEXEC) for ns in namespaces]
    # Frozen objects are never scanned by the collector again, so children do not
    # copy-on-write the whole heap just by collecting.
    gc.collect()
    gc.freeze()
    for stream in (sys.stdout, sys.stderr):  # children inherit these streams: empty
        stream.flush()
    sizes = _status_kb("VmRSS", "RssAnon", "VmSize")
    ready = f"ready rss_kb={sizes['VmRSS']} anon_kb={sizes['RssAnon']} vsz_kb={sizes['VmSize']}"
    control.send(ready.encode())
    control.detach()  # fd 0 belongs to the C loop from here on
    loopback = int(config["loopback"])
    spec = _ZygoteSpec(0, (ctypes.c_int * len(own))(*own), len(own), int(fresh_net), loopback)
    status_fd = ctypes.c_int(-1)
    memfd = lib.rbjail_zygote_serve(ctypes.byref(spec), ctypes.byref(status_fd))
    if memfd < 0:
        os._exit(0)  # the worker closed this pool member
    # In an execution's program: forked in C, so CPython's own after-fork work
    # (thread states, import lock, os.register_at_fork hooks such as random's
    # reseeding) has not happened yet.
    ctypes.pythonapi.PyOS_AfterFork_Child()
    return _program(memfd, status_fd.value)


def _keep_code(paths: list[str]) -> None:
    """Load and run the worker's code modules now, before forking (``PoolConfig.keep_code``).

    Each file is a marshalled module whose body only defines (its ``main()`` runs
    when it is ``__main__``, as the judging harness's does). Its body runs here,
    once, under a name that is not ``__main__``. An execution's compiled bootstrap
    (``languages.python``) looks its entry file's bytes up in
    ``sys.modules[_KEPT_MODULE].code`` and runs what it finds there: a line that
    calls that module's ``main()`` and exits with its result, as the module run as
    ``__main__`` would. So the execution neither unmarshals the code nor runs its
    body: in a forked interpreter those cost ~1 ms and ~1-2 ms, mostly
    copy-on-write faults (every constant, function object and global written
    afresh; the judging harness, docs/performance.md). A file that cannot be
    loaded, or whose body fails or defines no ``main``, is skipped: its executions
    load and run their own, as without a zygote.
    """
    code: dict[bytes, types.CodeType] = {}
    mains: list[Any] = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
            loaded = marshal.loads(data)  # noqa: S302 - the worker's own file, bound read-only
        except (OSError, ValueError, EOFError, TypeError):
            continue
        if not isinstance(loaded, types.CodeType):
            continue
        module = types.ModuleType(f"{_KEPT_MODULE}_{len(mains)}")
        try:
            exec(loaded, vars(module))  # noqa: S102 - the worker's own module, defining only
        except Exception:  # noqa: BLE001, S112 - skipped: its executions run their own copy
            continue
        main = vars(module).get("main")
        if not callable(main):
            continue
        entry = f"raise SystemExit(__import__({_KEPT_MODULE!r}).mains[{len(mains)}]())"
        code[data] = compile(entry, path, "exec", dont_inherit=True)
        mains.append(main)
    if code:
        kept = types.ModuleType(_KEPT_MODULE)
        vars(kept).update(code=code, mains=mains)
        sys.modules[_KEPT_MODULE] = kept


def _precompile(commands: list[str]) -> None:
    """Compile the worker's ``-c`` commands now, before forking (``PoolConfig.precompile``),
    exactly as the program's own compile at the bottom of this file would (a command
    that does not compile is left to it, which reports its error as a fresh
    interpreter does)."""
    for command in commands:
        with contextlib.suppress(SyntaxError, ValueError):
            _PRECOMPILED[command] = compile(command, "<string>", "exec", dont_inherit=True)


# ---------------------------------------------------------------------- the program


def _program(memfd: int, status_fd: int) -> _Program:
    """Give the confined program a fresh interpreter's state; report faults to pid 1."""
    try:
        chunks = []
        while chunk := os.read(memfd, 1 << 16):
            chunks.append(chunk)
        os.close(memfd)
        # marshal: the worker runs this same interpreter version, and unlike json
        # it touches no Python-level module pages (each costs a copy-on-write).
        spec: dict[str, Any] = marshal.loads(b"".join(chunks))  # noqa: S302 - the worker wrote it
        namespace = _fresh_interpreter_state(spec)
    except BaseException as exc:  # noqa: BLE001 - must report, never run the program half-set-up
        with contextlib.suppress(OSError):
            status = socket.socket(fileno=status_fd)
            status.send(f"error program setup: {type(exc).__name__}: {exc}".encode())
            status.detach()
        os._exit(_JAIL_FAULT)
    os.close(status_fd)
    return _Program(spec["code"], namespace)


def _fresh_interpreter_state(spec: dict[str, Any]) -> dict[str, Any]:
    """What a new interpreter would have: streams, argv, __main__, import caches."""
    # The zygote's own streams were made by this interpreter at start-up over a
    # socket (fd 0) and pipes (fds 1, 2), never used, and fd 0-2 now are the
    # execution's pipes: they are what a fresh start would make, except stdin
    # when it is /dev/null (seekable, unlike the socket).
    try:
        os.lseek(0, 0, os.SEEK_CUR)
    except OSError:
        pass
    else:
        stream = _open_stream(0, sys.__stdin__)
        sys.stdin = stream
        vars(sys)["__stdin__"] = stream  # (typeshed calls it final; CPython sets it so)
    sys.argv = ["-c", *spec["args"]]
    sys.orig_argv = list(spec["argv"])
    loader = sys.modules["__main__"].__loader__
    main = types.ModuleType("__main__")
    main.__loader__ = loader
    vars(main).update(__annotations__={}, __builtins__=sys.modules["builtins"])
    sys.modules["__main__"] = main
    # Files in the work dir shadow modules on sys.path[0] (''): a module the zygote
    # preloaded under such a name must be found afresh, as a new interpreter would.
    for name in spec["shadow"]:
        if name in sys.modules:  # (a submodule is only ever loaded with its package)
            prefix = name + "."
            for loaded in [m for m in sys.modules if m == name or m.startswith(prefix)]:
                del sys.modules[loaded]
    # The finder for '' (the cwd) cached the zygote's own cwd: another directory.
    sys.path_importer_cache.pop("", None)
    return vars(main)


def _open_stream(fd: int, like: Any) -> io.TextIOWrapper:
    """A standard stream as CPython's create_stdio builds it, with this interpreter's choices."""
    write = fd != 0
    unbuffered = bool(like.write_through)
    buffering = 0 if write and unbuffered else -1
    # closefd=False, as CPython's own: the program may close sys.stdout, not fd 1.
    buffer = open(fd, "wb" if write else "rb", buffering, None, None, None, False)  # noqa: SIM115
    raw: Any = getattr(buffer, "raw", buffer)
    raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
    line_buffering = not unbuffered and (os.isatty(fd) or fd == 2)
    stream = io.TextIOWrapper(buffer, like.encoding, like.errors, "\n", line_buffering, unbuffered)
    stream.mode = "w" if write else "r"  # type: ignore[misc]
    return stream


class _Program:
    """The confined program's code and globals, and CPython's end-of-run behaviour.

    What ``PyErr_Print`` and ``Py_FinalizeEx`` do that a program can observe:
    SystemExit's status and message, the traceback through ``sys.excepthook``,
    ``sys.last_*``, joining threads, atexit, flushing the standard streams (120
    when that fails), finalising the program's own objects, and dying by SIGINT
    after an unhandled KeyboardInterrupt. Not done: tearing down the modules the
    zygote preloaded, which the program shares untouched (that alone costs ~5 ms,
    because it writes to every page of the inherited heap).
    """

    def __init__(self, code: str, namespace: dict[str, Any]) -> None:
        self.code = code
        self.namespace: dict[str, Any] | None = namespace
        self.status = 0
        self.interrupted = False
        # sys.modules keeps import order: what the program imports comes after.
        self._before = len(sys.modules)

    def uncaught(self, exc: BaseException) -> None:
        """What CPython's -c does with an exception that ends the program."""
        if isinstance(exc, SystemExit):
            self.status = _system_exit_status(exc)
            return
        # The traceback's first entry is this file's frame that ran exec().
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        exc.with_traceback(tb)
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        try:
            sys.excepthook(type(exc), exc, tb)
        except BaseException as hook_error:  # noqa: BLE001 - as PyErr_Print: report both
            sys.__stderr__.write("Error in sys.excepthook:\n")  # type: ignore[union-attr]
            sys.__excepthook__(type(hook_error), hook_error, hook_error.__traceback__)
            sys.__stderr__.write("\nOriginal exception was:\n")  # type: ignore[union-attr]
            sys.__excepthook__(type(exc), exc, tb)
        self.status = 1
        self.interrupted = type(exc) is KeyboardInterrupt

    def exit(self) -> NoReturn:
        """Finish as Py_FinalizeEx would, then leave with the program's status."""
        status = self.status
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        atexit._run_exitfuncs()
        if not _flush_std_streams():
            status = 120
        self._finalise_program_objects()
        # What finalisers printed: CPython's streams flush it as they are freed,
        # silently and without touching the status.
        _flush_std_streams(report=False)
        if self.interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(status)

    def _finalise_program_objects(self) -> None:
        """Drop the program's modules and globals so their objects finalise (files flush)."""
        names = ["__main__", *reversed(list(sys.modules)[self._before :])]
        self.namespace = None
        refs = []
        for name in names:
            module = sys.modules.pop(name, None)
            if module is not None:
                with contextlib.suppress(TypeError):
                    refs.append(weakref.ref(module))
        del module
        gc.collect()
        survivors = [alive for ref in refs if (alive := ref()) is not None]
        for alive in survivors:  # still referenced: clear their globals, as CPython does last
            _clear_module_dict(vars(alive))
        if survivors:
            del alive, survivors
            gc.collect()


def _system_exit_status(exc: SystemExit) -> int:
    """_Py_HandleSystemExit: an int code is the status; anything else is printed, status 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        # exit() takes a C int: CPython converts with PyLong_AsLong (-1 on overflow).
        return code if -(2**63) <= code < 2**63 else -1
    # As CPython: a broken stderr does not change the status.
    with contextlib.suppress(BaseException):
        sys.stderr.write(str(code))
        sys.stderr.write("\n")
    return 1


def _flush_std_streams(*, report: bool = True) -> bool:
    """flush_std_files(): False when a flush failed (a failed stdout flush is reported)."""
    ok = True
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except BaseException as exc:  # noqa: BLE001 - as flush_std_files(): report, status 120
            ok = False
            if report and name == "stdout":
                _write_unraisable(stream, exc)
    return ok


def _write_unraisable(stream: Any, exc: BaseException) -> None:
    """What the default unraisable hook prints for a failed flush at exit."""
    import traceback  # only on this rare path

    with contextlib.suppress(BaseException):
        err = sys.stderr
        err.write(f"Exception ignored in: {stream!r}\n")
        # The flush was called from C there: no traceback, only the exception.
        traceback.print_exception(type(exc), exc, None, file=err)
        err.flush()


def _clear_module_dict(namespace: dict[str, Any]) -> None:
    """_PyModule_ClearDict: names with one leading underscore first, then the rest."""
    for first_pass in (True, False):
        for key in list(namespace):
            single = key.startswith("_") and not key.startswith("__")
            if key != "__builtins__" and single == first_pass:
                namespace[key] = None


# The program runs here, at the zygote's module level, so that its stack starts
# as shallow as a fresh interpreter's (one frame deeper: this module's).
if __name__ == "__main__":
    _program_run = main()
    try:
        exec(  # noqa: S102 - running the confined program is the point
            _PRECOMPILED.get(_program_run.code)
            # As python -c compiles (this module's own future flags not inherited), here:
            # a SyntaxError's traceback then starts at this frame, which uncaught() drops.
            or compile(_program_run.code, "<string>", "exec", dont_inherit=True),
            _program_run.namespace,
        )
    except BaseException as _uncaught:  # noqa: BLE001 - every way a program ends is handled
        _program_run.uncaught(_uncaught)
        del _uncaught
    _program_run.exit()
