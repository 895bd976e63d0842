"""What the JVM languages fetched as jars (Kotlin, Scala) share: the host's JDK and its flags.

Their compilers are Java programs run by the host's ``java``, their programs run on it too;
the jars live in ``fetched/<name>/lib`` (infra/toolchains/fetch.sh). Java itself
(``java.py``) keeps its own copy of the flags: it needs no fetched jars.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import Toolchain, read_only
from sandbox_workers.languages.java import Java

__all__ = [
    "COMPILER_RESERVE_MB",
    "JVM_FLAGS",
    "JVM_OVERHEAD_MB",
    "JVM_RESERVE_MB",
    "compiler_flags",
    "discover_jvm_toolchain",
    "run_flags",
]

# Metaspace, code cache, thread stacks and the JVM itself, outside -Xmx (as java.py).
JVM_OVERHEAD_MB = 192
# Reserved, untouched address space (as java.py: -Xss stacks, class space, code cache).
JVM_RESERVE_MB = 2048
COMPILER_RESERVE_MB = 1024
# The compilers' heap: "hello world" peaks near 300 MB resident in kotlinc.
_COMPILER_HEAP_MB = 1024
JVM_FLAGS = (
    "-XX:+UseSerialGC",  # one GC thread: fewer processes, no parallel-GC spikes
    "-XX:-UsePerfData",  # no hsperfdata file in /tmp
    "-Xshare:auto",
    "-XX:TieredStopAtLevel=1",  # C1 only: short-lived programs; halves kotlinc's CPU time
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:ReservedCodeCacheSize=64m",
)


def compiler_flags() -> tuple[str, ...]:
    """``java`` flags for a compiler written in a JVM language."""
    return (f"-Xmx{_COMPILER_HEAP_MB}m", "-Xss8m", *JVM_FLAGS)


def run_flags(memory_mb: int) -> tuple[str, ...]:
    """``java`` flags for a judged program: the heap capped at the memory limit, asserts on."""
    return (
        f"-Xmx{memory_mb}m",
        "-Xss64m",  # deep recursion is common in judged solutions
        "-ea",
        *JVM_FLAGS,
    )


def discover_jvm_toolchain(
    language: str, state_dir: Path, lib: Path, jar: str, jars: tuple[str, ...]
) -> Toolchain | None:
    """The host's JDK plus the fetched jars in ``lib``; None when either is missing.

    ``jar`` is the versioned file name (``kotlin-stdlib-*.jar``) whose version names the
    toolchain; ``jars`` are the paths' roles, each a glob matched in ``lib`` (one file).
    """
    java = Java().discover(state_dir, lib.parent)
    if java is None or not lib.is_dir():
        return None
    paths = {"java": java.paths["java"], "lib": str(lib.resolve())}
    for role in jars:
        found = sorted(lib.glob(f"{role}-[0-9]*.jar"))
        if len(found) != 1:
            return None
        paths[role] = str(found[0].resolve())
    match = re.search(r"-(\d[\w.-]*)\.jar$", Path(paths[jar]).name)
    if match is None:
        return None
    return Toolchain(
        language=language,
        version=f"{language}-{match.group(1)}",
        paths=paths,
        mounts=read_only(*(m.host for m in java.mounts), lib),
    )
