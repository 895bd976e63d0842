"""From what happened to an execution to a verdict.

Order matters: the jail's own flags (timeout, memory, output) are facts; an
exit status is only a symptom. A crash whose stderr shows an allocation failure
(Python's MemoryError, the JVM's OutOfMemoryError, ``std::bad_alloc``, V8's heap
limit, Rust's and Go's out-of-memory aborts, bash's ``xmalloc: cannot allocate``)
is a memory limit: under an address-space limit that is how running out of
memory looks from inside.
"""

from __future__ import annotations

import re
import signal

from sandbox_workers.sandbox import ExecResult
from schemas import Verdict

__all__ = [
    "describe_exit",
    "describe_timeout",
    "failure_verdict",
    "mentions_out_of_memory",
    "tail_text",
]

_OUT_OF_MEMORY = re.compile(
    rb"MemoryError|[Cc]annot allocate|java\.lang\.OutOfMemoryError|std::bad_alloc"
    rb"|JavaScript heap out of memory|memory allocation of \d+ bytes failed"
    rb"|runtime: out of memory|fatal error: out of memory|Out of memory"
    rb"|System\.OutOfMemoryException"  # .NET (Mono): the GC heap at max-heap-size
)
# Only the end of stderr is searched: that is where a dying runtime reports.
_STDERR_WINDOW = 16 * 1024
# CPU time measured without the slot's cgroup counter (see sandbox_workers.jail).
_PER_PROCESS_SOURCES = frozenset({"procfs", "process"})


def failure_verdict(result: ExecResult) -> Verdict | None:
    """The verdict for an execution that did not end cleanly; None if it did."""
    if result.timed_out or result.signal == signal.SIGXCPU:
        return Verdict.TIME_LIMIT
    if result.memory_exceeded:
        return Verdict.MEMORY_LIMIT
    if result.output_exceeded or result.signal == signal.SIGXFSZ:
        return Verdict.OUTPUT_LIMIT
    if result.exit_code == 0 and result.signal is None:
        return None
    if mentions_out_of_memory(result.stderr):
        return Verdict.MEMORY_LIMIT
    return Verdict.RUNTIME_ERROR


def mentions_out_of_memory(stderr: bytes) -> bool:
    """Whether a runtime reported an allocation failure at the end of ``stderr``."""
    return _OUT_OF_MEMORY.search(stderr[-_STDERR_WINDOW:]) is not None


def describe_exit(result: ExecResult, limit: int = 200) -> str:
    """A short human-readable reason: the signal or status, and stderr's last line."""
    if result.timed_out:
        return describe_timeout(result)[:limit]
    if result.memory_exceeded:
        return "memory limit exceeded"
    if result.output_exceeded:
        return "output limit exceeded"
    if result.signal is not None:
        reason = f"killed by signal {_signal_name(result.signal)}"
    else:
        reason = f"exit status {result.exit_code}"
    last = _last_line(result.stderr)
    text = f"{reason}: {last}" if last else reason
    return text[:limit]


def describe_timeout(result: ExecResult) -> str:
    """Which time limit ended the run: the CPU limit, or the wall-clock backstop."""
    cpu, wall = result.cpu_ms, result.wall_ms
    if result.timed_out_by == "cpu":
        text = f"cpu limit: {cpu:.0f} ms of CPU time used (in {wall:.0f} ms)"
    elif result.timed_out_by == "wall":
        text = (
            f"wall backstop: still running after {wall:.0f} ms with {cpu:.0f} ms"
            " of CPU time (sleeping or blocked)"
        )
    else:
        text = f"timed out after {wall:.0f} ms"
    if result.cpu_source in _PER_PROCESS_SOURCES:
        text += f" [degraded: no cgroup CPU counter, CPU counted per process ({result.cpu_source})]"
    return text


def tail_text(data: bytes, limit: int) -> str:
    """The last ``limit`` bytes of an output stream, decoded leniently."""
    if limit <= 0:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


def _last_line(stderr: bytes) -> str:
    for line in reversed(stderr[-4096:].decode("utf-8", errors="replace").splitlines()):
        if line.strip():
            return line.strip()
    return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
