"""Helpers of the long-running load benchmarks (overload, soak): processes, memory, workload.

- ``ProcessMonitor`` samples RSS, open file descriptors and descendant counts of the
  broker JVM, each worker, each worker's zygotes and the aggregator process; and, for a
  JVM, its live heap (``jvm_live_heap_mb``: used after a full collection).
- ``aggregator_process`` runs the stream aggregator in a process of its own, so its
  memory is measured apart from the benchmark's producer and watcher.
- ``humaneval_backlog`` makes N distinct HumanEval completions (canonical and broken
  programs, each copy tagged with a comment so no two are the same program).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from producers import HumanEvalSample, build_batches, humaneval_samples
from schemas import BatchManifest, KafkaSettings

__all__ = [
    "ProcessMonitor",
    "aggregator_process",
    "flatness",
    "humaneval_backlog",
    "humaneval_stream",
    "jvm_live_heap_mb",
    "windowed_rates",
]

_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# -- /proc ---------------------------------------------------------------------------


def run_reported(
    name: str,
    body: Coroutine[Any, Any, dict[str, Any]],
    *,
    report: Callable[[dict[str, Any]], Any],
    checks: Callable[[dict[str, Any]], Iterable[tuple[str, Any]]],
    meta: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Run a load benchmark's ``body``; report it, add its targets and run metadata.

    SIGTERM takes the same path as Ctrl-C, so the benchmark's context managers stop
    the broker, workers and aggregator it started instead of leaving them running.
    None when interrupted.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    load_before = os.getloadavg()
    started = time.monotonic()
    try:
        result = asyncio.run(body)
    except KeyboardInterrupt:
        return None
    report(result)
    result["targets"] = {key: target.as_json() for key, target in checks(result)}
    result["meta"] = {
        "benchmark": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **(meta or {}),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - started, 1),
    }
    return result


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (0 if it is gone)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return pages * _PAGE_KB / 1024


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid`` (0 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


_TICKS = os.sysconf("SC_CLK_TCK")
# A top-level space of `jcmd GC.heap_info` (Serial: new and tenured generation; G1: the
# whole heap): "total 116416K, used 7181K". Metaspace lines are not heap.
_HEAP_SPACE = re.compile(r"^ (?!Metaspace)\S.*?total (\d+)K, used (\d+)K", re.MULTILINE)


def jvm_live_heap_mb(pid: int, *, timeout_s: float = 30.0) -> float | None:
    """The heap ``pid`` uses right after a full collection, in MiB: its live set, the
    figure a leak inside a JVM grows. None without ``jcmd`` or when the JVM does not
    answer. It pauses that JVM for the collection (tens of ms on a 512 MiB heap)."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=timeout_s,
                       check=True)  # fmt: skip
        info = subprocess.run([jcmd, str(pid), "GC.heap_info"], capture_output=True,
                              text=True, timeout=timeout_s, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    used_kb = [int(used) for _, used in _HEAP_SPACE.findall(info.stdout)]
    return sum(used_kb) / 1024 if used_kb else None


def age_s(pid: int) -> float:
    """Seconds since ``pid`` started (0 if it is gone)."""
    try:
        started = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return uptime - started / _TICKS


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(stat.parent.name))
    return children


def descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...)."""
    found: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        child = stack.pop()
        found.append(child)
        stack.extend(children.get(child, []))
    return found


@dataclass
class ProcessMonitor:
    """Samples every ``interval_s`` the RSS (MiB) and fds of each named process and worker,
    and of the processes below each worker. ``series`` maps a name to (t, value) samples.

    Below a worker, a process older than ``zygote_age_s`` is counted as one of its
    zygotes (``<worker>.zygotes.*``: summed RSS and fds, and their count; the pool
    retires a zygote after a number of uses, so no single pid lasts a long run);
    younger ones come and go with executions (``<worker>.transient.processes``).

    Each of ``jvms`` (names in ``processes``) also gets ``<name>.live_heap_mb`` every
    ``heap_interval_s``: a JVM's RSS grows while its heap fills towards -Xmx, which
    says nothing of a leak; its live set after a full collection does.
    """

    processes: dict[str, int]
    workers: dict[str, int] = field(default_factory=dict)
    interval_s: float = 1.0
    zygote_age_s: float = 5.0
    jvms: Sequence[str] = ()
    heap_interval_s: float = 60.0
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def sample(self) -> None:
        now = time.monotonic()
        children = _children_map()
        for name, pid in {**self.processes, **self.workers}.items():
            self._add(f"{name}.rss_mb", now, rss_mb(pid))
            self._add(f"{name}.fds", now, open_fds(pid))
        for name, pid in self.workers.items():
            below = descendants(pid, children)
            zygotes = [p for p in below if age_s(p) >= self.zygote_age_s]
            self._add(f"{name}.zygotes.rss_mb", now, sum(rss_mb(p) for p in zygotes))
            self._add(f"{name}.zygotes.fds", now, sum(open_fds(p) for p in zygotes))
            self._add(f"{name}.zygotes.processes", now, len(zygotes))
            self._add(f"{name}.transient.processes", now, len(below) - len(zygotes))

    def sample_heaps(self) -> None:
        for name in self.jvms:
            live = jvm_live_heap_mb(self.processes[name])
            if live is not None:
                self._add(f"{name}.live_heap_mb", time.monotonic(), live)

    def _add(self, key: str, now: float, value: float) -> None:
        self.series.setdefault(key, []).append((now, value))

    async def run(self, stop: asyncio.Event) -> None:
        """Sample until ``stop`` is set (the first sample at once)."""
        heaps_due = time.monotonic()
        while not stop.is_set():
            await asyncio.to_thread(self.sample)
            if self.jvms and time.monotonic() >= heaps_due:
                heaps_due += self.heap_interval_s
                await asyncio.to_thread(self.sample_heaps)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    def report(self, start: float, end: float) -> dict[str, Any]:
        """Per series, over [start, end]: first, max, last, and flatness."""
        out: dict[str, Any] = {}
        for key, points in sorted(self.series.items()):
            values = [v for t, v in points if start <= t <= end]
            if values:
                out[key] = {
                    "first": round(values[0], 1),
                    "max": round(max(values), 1),
                    "last": round(values[-1], 1),
                    **flatness(values),
                }
        return out


def flatness(values: Sequence[float]) -> dict[str, float]:
    """Growth of a series: median of its last third over the median of its first third,
    after a warm-up of the first 10 % (a 10 % rise reads 0.10)."""
    rest = list(values[len(values) // 10 :])
    if len(rest) < 3:
        return {"growth": 0.0}
    third = len(rest) // 3
    early, late = statistics.median(rest[:third]), statistics.median(rest[-third:])
    return {
        "early_median": round(early, 1),
        "late_median": round(late, 1),
        "growth": round(late / early - 1, 4) if early else 0.0,
    }


def windowed_rates(times: Iterable[float], window_s: float) -> list[float]:
    """Events per second in consecutive whole windows from the first event to the last."""
    ordered = sorted(times)
    if len(ordered) < 2:
        return []
    first = ordered[0]
    counts = [0] * int((ordered[-1] - first) // window_s)
    for t in ordered:
        index = int((t - first) // window_s)
        if index < len(counts):
            counts[index] += 1
    return [round(c / window_s, 2) for c in counts]


# -- the aggregator in a process of its own ---------------------------------------------

_AGGREGATOR = """
import asyncio, signal, sys
from consumers import AggregatorConfig, run_aggregator
from schemas import KafkaSettings, Topics

async def main() -> None:
    kafka = KafkaSettings(bootstrap_servers=sys.argv[1], topics=Topics(prefix=sys.argv[2]))
    stop = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    ready = asyncio.Event()
    task = asyncio.create_task(run_aggregator(
        kafka, AggregatorConfig(group_id=sys.argv[2] + "aggregator"), shutdown=stop, ready=ready
    ))
    await ready.wait()
    print("ready", flush=True)
    await task

asyncio.run(main())
"""


@contextlib.asynccontextmanager
async def aggregator_process(kafka: KafkaSettings) -> AsyncIterator[int]:
    """The aggregator as a child process until the block exits; yields its pid."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _AGGREGATOR, kafka.bootstrap_servers, kafka.topics.prefix,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=90)
        if b"ready" not in line:
            raise RuntimeError(f"the aggregator did not start (status {await proc.wait()})")
        yield proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


# -- the workload ------------------------------------------------------------------------


def humaneval_backlog(
    count: int, *, tag: str, batch_size: int, limit: int | None = None
) -> list[tuple[BatchManifest, list[HumanEvalSample]]]:
    """``count`` distinct HumanEval completions (copies of the 164 canonical + 164
    broken programs, each copy commented with ``tag`` and its number), in batches."""
    copies = list(itertools.islice(humaneval_stream(tag=tag, limit=limit), count))
    return list(build_batches(copies, batch_size=batch_size, run_id=tag, deadline_s=3600))


def _copy(sample: HumanEvalSample, tag: str) -> HumanEvalSample:
    completion = sample.completion
    response = (completion.response or "").replace("```python\n", f"```python\n# {tag}\n", 1)
    changed = msgspec.structs.replace(
        completion,
        sample_id=f"{tag}-{completion.sample_id}",
        group_id=f"{tag}-{completion.group_id}",
        response=response,
    )
    return HumanEvalSample(changed, sample.task_id, sample.canonical)


def humaneval_stream(*, tag: str, limit: int | None = None) -> Iterator[HumanEvalSample]:
    """Distinct HumanEval completions without end (copy ``n`` of each program is
    commented ``<tag>-<n>``), canonical and broken program of a problem side by side."""
    pool = humaneval_samples(limit=limit)
    for copy in itertools.count():
        for sample in pool:
            yield _copy(sample, f"{tag}-{copy}")
