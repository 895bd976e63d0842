"""A live Python session's server: the ``-c`` program of one jailed interpreter.

Runs inside a jail (its own namespaces, a private read-only root, tmpfs /work
and /tmp, a cgroup slot, an unprivileged uid, seccomp), never imported by the
worker (standard library only; the jail reads it as text, as it does the
pool's zygote). The worker side is :mod:`sandbox_workers.jail.live`.

Protocol (the worker's pipes are the interpreter's stdin and stdout; both are
moved to private fds at start, and 0-2 point at /dev/null between cells)::

    worker -> server   "!4sIII" REQUEST_MAGIC, seq, output cap, code length; code (UTF-8)
    server -> worker   "!4sIBII" RESULT_MAGIC, seq, status, stdout length, stderr length;
                       stdout, stderr (each at most cap + 1 bytes: one more than the
                       cap says the cell went past it)

The first result (seq 0, status ok, no output) says the server is up. Each
cell runs with ``exec`` in one namespace (a fresh ``__main__`` module) that
lives as long as the session; its stdout and stderr are captured at the fd
level (C code and child processes included) in a memfd each, read back after
the cell. Status 0: it ran to its end; 1: it raised (the traceback, without
this file's frames, is in its stderr); 2: it raised SystemExit (the server
then exits). Everything here runs in the same process as the cell, which can
change or forge any of it: the worker trusts none of it but the framing,
which it checks (see :mod:`sandbox_workers.jail.live`), and enforces every
limit itself.
"""

from __future__ import annotations

import os
import struct
import sys
import types

REQUEST = struct.Struct("!4sIII")
RESULT = struct.Struct("!4sIBII")
REQUEST_MAGIC = b"RBPQ"
RESULT_MAGIC = b"RBPR"
OK, ERROR, EXIT = 0, 1, 2
# This program's own frames (``-c`` code is "<string>"), left out of tracebacks.
_OWN_FILE = (lambda: None).__code__.co_filename
# Each cell's source, for the lines of a traceback (handed to linecache on an error).
_sources: dict[str, str] = {}


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib is not imported: an idle session stays small
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - the cell may have closed or replaced it
            pass


def _show_error(exc: BaseException) -> None:
    """The traceback as a REPL shows it: from the cell's first frame on."""
    import linecache  # only when a cell raised: an idle session stays small
    import traceback

    for name, source in _sources.items():
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _OWN_FILE:
        tb = tb.tb_next
    try:
        traceback.print_exception(type(exc), exc, tb)
    except Exception:  # noqa: BLE001 - stderr closed or replaced by the cell
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode(errors="replace"))


def _run(code: bytes, seq: int, namespace: dict[str, object]) -> int:
    source = code.decode("utf-8", errors="replace")
    name = f"<cell {seq}>"
    _sources[name] = source  # a traceback from a function it defines shows its lines later
    try:
        exec(compile(source, name, "exec"), namespace)  # noqa: S102 - the session's purpose
    except SystemExit:
        return EXIT
    except BaseException as exc:  # noqa: BLE001 - whatever the cell raised is its result
        _show_error(exc)
        return ERROR
    return OK


def _cell(requests: int, results: int, me: int, namespace: dict[str, object]) -> None:
    magic, seq, cap, size = REQUEST.unpack(_read_exactly(requests, REQUEST.size))
    if magic != REQUEST_MAGIC:
        raise EOFError
    code = _read_exactly(requests, size)
    out = os.memfd_create("stdout", os.MFD_CLOEXEC)
    err = os.memfd_create("stderr", os.MFD_CLOEXEC)
    _flush()
    os.dup2(out, 1)
    os.dup2(err, 2)
    try:
        status = _run(code, seq, namespace)
    finally:
        _flush()
        if os.getpid() != me:  # a child the cell forked: never a second server
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    stdout, stderr = os.pread(out, cap + 1, 0), os.pread(err, cap + 1, 0)
    os.close(out)
    os.close(err)
    header = RESULT.pack(RESULT_MAGIC, seq, status, len(stdout), len(stderr))
    _write_all(results, header + stdout + stderr)
    if status == EXIT:
        os._exit(0)


def serve() -> None:
    """Answer cells until the worker closes the request pipe."""
    requests = os.dup(0)
    results = os.dup(1)
    os.set_inheritable(requests, False)
    os.set_inheritable(results, False)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    me = os.getpid()
    _write_all(results, RESULT.pack(RESULT_MAGIC, 0, OK, 0, 0))
    while True:
        try:
            _cell(requests, results, me, main.__dict__)
        except EOFError:
            return


if __name__ == "__main__":
    serve()
