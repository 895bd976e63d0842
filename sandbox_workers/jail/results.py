"""An execution's :class:`~sandbox_workers.sandbox.ExecResult`, from what was measured.

Three sources: the jail's init reports exit status, times and peak RSS (absent
when the worker stopped the jail first); the slot's cgroup adds CPU time, peak
memory and whether the OOM killer struck; the launch has the captured output
and why the worker stopped it, if it did.
"""

from __future__ import annotations

import signal
from typing import Literal

from sandbox_workers.jail.cgroups import CgroupStats
from sandbox_workers.jail.process import JailReport, Launch, SessionRun
from sandbox_workers.sandbox import ExecResult

__all__ = ["exec_result"]


def exec_result(
    launch: Launch | SessionRun,
    report: JailReport | None,
    stats: CgroupStats | None,
    elapsed_ms: float,
    files: dict[str, bytes],
) -> ExecResult:
    """The result from the launch (or session run), its init's report and its slot's cgroup."""
    exit_code: int | None = None
    signum: int | None = int(signal.SIGKILL)
    wall_ms, cpu_ms, rss_kb = elapsed_ms, 0.0, 0
    timed_out_by: Literal["cpu", "wall"] | None = None
    cpu_source, waited_ms = "", 0.0
    # No report: we stopped the jail (output cap, backstop deadline) before its
    # init could report, and the program died with its pid namespace (SIGKILL).
    if report is not None:
        exit_code, signum = report.exit_code, report.signal
        wall_ms, cpu_ms, rss_kb = report.wall_ms, report.cpu_ms, report.maxrss_kb
        cpu_source, waited_ms = report.cpu_source, report.waited_ms
        if report.timed_out:
            timed_out_by = "wall" if report.limit == "wall" else "cpu"
    elif stats is not None and stats.cpu_ms is not None:
        cpu_ms = stats.cpu_ms
    if stats is not None:
        # The cgroup sees the whole tree and its tmpfs files, but not file pages
        # that were already cached; the largest RSS sees those: report the larger.
        rss_kb = max(rss_kb, stats.peak_memory_kb or 0)
    if timed_out_by is None and signum == signal.SIGXCPU:
        timed_out_by = "cpu"  # one process's RLIMIT_CPU
    if timed_out_by is None and launch.stop_reason == "timeout":
        timed_out_by = "wall"  # the worker's own deadline: the jail's init did not stop it
    return ExecResult(
        exit_code=exit_code,
        signal=signum,
        stdout=launch.stdout,
        stderr=launch.stderr,
        wall_ms=wall_ms,
        cpu_ms=cpu_ms,
        peak_memory_kb=rss_kb,
        timed_out=timed_out_by is not None,
        memory_exceeded=stats.oom_killed if stats is not None else False,
        output_exceeded=launch.output_exceeded,
        files=files,
        timed_out_by=timed_out_by,
        cpu_source=cpu_source,
        waited_ms=waited_ms,
    )
