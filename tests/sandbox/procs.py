"""Process-table checks shared by the sandbox tests (a /proc scan, no psutil)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "children_of_this_process",
    "jailed_processes",
    "parent_of",
    "processes_with",
    "spawner_children",
]


def processes_with(marker: str) -> list[int]:
    """Pids whose command line carries marker (a /proc scan, no psutil)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


def parent_of(pid: int) -> int:
    """The parent's pid (FileNotFoundError once ``pid`` is gone)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def jailed_processes(marker: str) -> list[int]:
    """Marked processes running as the jail's uid (not the launcher, whose argv has it too)."""
    found = []
    for pid in processes_with(marker):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if "\nUid:\t65534\t" in status:
            found.append(pid)
    return found


def children_of_this_process() -> list[int]:
    """Direct children of the test process (zombies included), but the slot spawners."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            # Only launchers count: the session may own other children (the Kafka broker).
            launcher = b"rbjail" in cmdline and b"--spawner" not in cmdline
            if int(stat.rpartition(")")[2].split()[1]) == me and launcher:
                found.append(int(entry))
    return found


def spawner_children(resident: frozenset[int] = frozenset()) -> list[int]:
    """Processes whose parent is one of our slot spawners: jails still alive.

    ``resident``: processes the sandbox keeps between executions (warm zygotes' jails).
    """
    me, spawners, parents = os.getpid(), set(), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            parents[int(entry)] = ppid
            if ppid == me and b"--spawner" in cmdline:
                spawners.add(int(entry))
    return [pid for pid, ppid in parents.items() if ppid in spawners and pid not in resident]
