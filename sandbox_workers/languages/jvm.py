"""What the JVM languages fetched as jars (Kotlin, Scala) share: the host's JDK and its flags.

Their compilers are Java programs run by the host's ``java``, their programs run on it too;
the jars live in ``fetched/<name>/lib`` (infra/toolchains/fetch.sh). Java itself
(``java.py``) keeps its own copy of the flags: it needs no fetched jars.

Class-data sharing: at discovery each language gets two CDS archives, one for its
programs (the standard library's classes a trivial program loads) and one
for its compiler; the JVM maps their parsed classes instead of loading them from the jars,
which halves a compile's and a small program's CPU time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import re
import secrets
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sandbox_workers.compile_cache import replace_file
from sandbox_workers.languages.base import BASE_ENV, Language, Launch, Toolchain, read_only
from sandbox_workers.languages.java import Java
from sandbox_workers.sandbox import BindMount
from schemas import Limits

__all__ = [
    "COMPILER_ARCHIVE",
    "COMPILER_RESERVE_MB",
    "JAR",
    "JVM_FLAGS",
    "JVM_OVERHEAD_MB",
    "JVM_RESERVE_MB",
    "RUNTIME_ARCHIVE",
    "compiler_flags",
    "discover_jvm_toolchain",
    "jar_launch",
    "run_flags",
]

# Where a Kotlin or Scala compile puts the program (the entry is its main class).
JAR = "main.jar"
# Metaspace, code cache, thread stacks and the JVM itself, outside -Xmx (as java.py).
JVM_OVERHEAD_MB = 192
# Reserved, untouched address space (as java.py: -Xss stacks, class space, code cache).
JVM_RESERVE_MB = 2048
COMPILER_RESERVE_MB = 1024
# The compilers' heap: "hello world" peaks near 300 MB resident in kotlinc.
_COMPILER_HEAP_MB = 1024
# Toolchain.paths roles of the CDS archives.
RUNTIME_ARCHIVE = "cds-runtime"
COMPILER_ARCHIVE = "cds-compiler"
# Training and dumping run trusted code on the host; a compile takes ~5 s of CPU.
_TRAINING_TIMEOUT_S = 300
JVM_FLAGS = (
    "-XX:+UseSerialGC",  # one GC thread: fewer processes, no parallel-GC spikes
    "-XX:-UsePerfData",  # no hsperfdata file in /tmp
    # auto, never on: an archive the JVM cannot use (a jar or the JDK changed since it
    # was dumped) is skipped silently, and the classes load from the jars as without it.
    "-Xshare:auto",
    "-XX:TieredStopAtLevel=1",  # C1 only: short-lived programs; halves kotlinc's CPU time
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:ReservedCodeCacheSize=64m",
)
# Dumping and checking an archive: the same layout flags as the runs that map it.
_DUMP_FLAGS = tuple(flag for flag in JVM_FLAGS if not flag.startswith("-Xshare"))


def _archive_flags(toolchain: Toolchain, role: str) -> tuple[str, ...]:
    archive = toolchain.paths.get(role)
    return (f"-XX:SharedArchiveFile={archive}",) if archive else ()


def compiler_flags(toolchain: Toolchain) -> tuple[str, ...]:
    """``java`` flags for a compiler written in a JVM language (its CDS archive if any)."""
    return (
        f"-Xmx{_COMPILER_HEAP_MB}m",
        "-Xss8m",
        *JVM_FLAGS,
        *_archive_flags(toolchain, COMPILER_ARCHIVE),
    )


def run_flags(toolchain: Toolchain, memory_mb: int) -> tuple[str, ...]:
    """``java`` flags for a judged program: the heap capped at the memory limit, asserts on.

    With a CDS archive the classpath must start with the standard library (the archive's
    classpath), the program's jar after it.
    """
    return (
        f"-Xmx{memory_mb}m",
        "-Xss64m",  # deep recursion is common in judged solutions
        "-ea",
        *JVM_FLAGS,
        *_archive_flags(toolchain, RUNTIME_ARCHIVE),
    )


def jar_launch(toolchain: Toolchain, library: str, entry: str, limits: Limits) -> Launch:
    """Run a program compiled into ``JAR``: ``java`` with :func:`run_flags`, the class
    ``entry`` on a class path that starts with the language's standard library
    (``toolchain.paths[library]``, the CDS archive's jar)."""
    return Launch(
        argv=(
            toolchain.paths["java"],
            *run_flags(toolchain, limits.memory_mb),
            "-cp",
            f"{toolchain.paths[library]}:{JAR}",
            entry,
        ),
        memory_overhead_mb=JVM_OVERHEAD_MB,
        reserve_mb=JVM_RESERVE_MB,
        max_processes=128,
    )


def discover_jvm_toolchain(
    language: Language,
    state_dir: Path,
    lib: Path,
    jar: str,
    jars: tuple[str, ...],
    *,
    training: str,
) -> Toolchain | None:
    """The host's JDK plus the fetched jars in ``lib``; None when either is missing.

    ``jar`` is the versioned file name (``kotlin-stdlib-*.jar``) whose version names the
    toolchain; ``jars`` are the paths' roles, each a glob matched in ``lib`` (one file);
    ``lib-jars`` is every jar in ``lib``, in a fixed order. ``training`` is the trivial
    program the CDS archives are trained on (cached in ``lib``'s sibling ``cds``).
    """
    java = Java().discover(state_dir, lib.parent)
    if java is None or not lib.is_dir():
        return None
    paths = {
        "java": java.paths["java"],
        "lib": str(lib.resolve()),
        "lib-jars": ":".join(sorted(str(path.resolve()) for path in lib.glob("*.jar"))),
    }
    for role in jars:
        found = sorted(lib.glob(f"{role}-[0-9]*.jar"))
        if len(found) != 1:
            return None
        paths[role] = str(found[0].resolve())
    match = re.search(r"-(\d[\w.-]*)\.jar$", Path(paths[jar]).name)
    if match is None:
        return None
    toolchain = Toolchain(
        language=language.name,
        version=f"{language.name}-{match.group(1)}",
        paths=paths,
        mounts=read_only(*(m.host for m in java.mounts), lib),
    )
    return with_archives(language, toolchain, lib.parent / "cds", training)


def with_archives(language: Language, toolchain: Toolchain, cds: Path, training: str) -> Toolchain:
    """``toolchain`` with its CDS archives, built once into ``cds`` (any that fail: without).

    Built on the host from trusted inputs only: the host's JDK, the fetched jars and the
    fixed ``training`` program, compiled and run once with ``-XX:DumpLoadedClassList``
    (its own classes dropped from the lists). The archives' directory is named by a hash
    of the JDK's version and every jar's contents, size and time (the JVM checks the last
    two), so a changed toolchain gets new ones. An archive is used only once ``java
    -Xshare:on`` (which fails rather than run without it) accepts it. Each is mounted
    read-only at its own path: the runtime one for programs, the compiler one for compiles.

    What a worker start checks is remembered against the files' identities (``_stat_key``)
    in ``cds``, so the next start on unchanged files runs no JVM and hashes no jar: it
    took ~0.4 s of CPU per start for Kotlin and Scala together.
    """
    java = toolchain.paths["java"]
    try:
        commands = _Training.of(language, toolchain, training)
        directory = cds / _archive_key(cds, java, toolchain.paths["lib-jars"], training)
        directory.mkdir(parents=True, exist_ok=True)
        archives = {
            COMPILER_ARCHIVE: directory / "compiler.jsa",
            RUNTIME_ARCHIVE: directory / "runtime.jsa",
        }
        if not all(path.exists() for path in archives.values()):
            commands.build(java, archives)
    except (OSError, subprocess.SubprocessError, ValueError):
        return toolchain  # an unwritable cache, a failed training run: no archives
    usable = {
        role: str(path)
        for role, path in archives.items()
        if path.exists() and _usable(java, path, commands.shared_classpath(role), role)
    }
    return dataclasses.replace(
        toolchain,
        paths={**toolchain.paths, **usable},
        mounts=toolchain.mounts + _mount(usable.get(RUNTIME_ARCHIVE)),
        compile_mounts=toolchain.compile_mounts + _mount(usable.get(COMPILER_ARCHIVE)),
    )


def _mount(archive: str | None) -> tuple[BindMount, ...]:
    return read_only(archive) if archive else ()


@dataclasses.dataclass(frozen=True)
class _Training:
    """The training program and the commands that compile it and run it (no archives)."""

    source: str
    source_name: str
    entry: str
    argv: dict[str, tuple[str, ...]]  # by archive role: the compiler's, the program's

    @classmethod
    def of(cls, language: Language, toolchain: Toolchain, training: str) -> _Training:
        source = language.prepare_source(training)
        name = language.source_name(source)
        step = language.compile_step(toolchain, name)
        if step is None:
            raise ValueError(f"{language.name} compiles nothing")
        launch = language.launch(toolchain, step.entry, Limits())
        argv = {COMPILER_ARCHIVE: step.argv, RUNTIME_ARCHIVE: launch.argv}
        return cls(source, name, step.entry, argv)

    def shared_classpath(self, role: str) -> str:
        """The jars an archive holds classes of: the classpath's leading absolute paths.

        The JVM uses an archive only when the run's classpath starts with these.
        """
        argv = self.argv[role]
        entries = argv[argv.index("-cp") + 1].split(":")
        shared = list(itertools.takewhile(os.path.isabs, entries))
        if not shared:
            raise ValueError(f"no jar leads the classpath of {argv}")
        return ":".join(shared)

    def build(self, java: str, archives: dict[str, Path]) -> None:
        """Compile and run the training program, then dump each archive still missing.

        Written to a temporary name and renamed: workers discovering at once may race.
        """
        with tempfile.TemporaryDirectory(prefix="rewardbus-cds-") as work:
            workdir = Path(work)
            (workdir / self.source_name).write_text(self.source, encoding="utf-8")
            for role, archive in archives.items():  # the compiler first: the run needs its jar
                loaded = workdir / f"{role}.loaded"
                _host_run(
                    (
                        *self.argv[role][:1],
                        f"-XX:DumpLoadedClassList={loaded}",
                        *self.argv[role][1:],
                    ),
                    workdir,
                )
                if archive.exists():
                    continue
                classes = workdir / f"{role}.classes"
                classes.write_text(self._library_classes(loaded.read_text()), encoding="utf-8")
                temporary = archive.with_name(f"{archive.name}.{secrets.token_hex(8)}.tmp")
                try:
                    _host_run(
                        (
                            java,
                            *_DUMP_FLAGS,
                            "-Xshare:dump",
                            f"-XX:SharedClassListFile={classes}",
                            f"-XX:SharedArchiveFile={temporary}",
                            "-cp",
                            self.shared_classpath(role),
                        ),
                        workdir,
                    )
                    if _accepts(java, temporary, self.shared_classpath(role)):
                        os.replace(temporary, archive)
                finally:
                    temporary.unlink(missing_ok=True)

    def _library_classes(self, loaded: str) -> str:
        """The class list without the training program's own classes (not in the jars)."""
        own = (self.entry, f"{self.entry}$")
        return "".join(
            line
            for line in loaded.splitlines(keepends=True)
            if not any(token == own[0] or token.startswith(own[1]) for token in line.split())
        )


def _host_run(argv: Sequence[str], workdir: Path) -> None:
    """A trusted host command (the JDK on the fetched jars and the training program)."""
    subprocess.run(  # noqa: S603 - argv list: the host's java and our fixed program
        argv,
        cwd=workdir,
        input=b"1 2\n",
        capture_output=True,
        timeout=_TRAINING_TIMEOUT_S,
        check=True,
        env={**BASE_ENV, "HOME": str(workdir), "TMPDIR": str(workdir)},
    )


def _usable(java: str, archive: Path, classpath: str, role: str) -> bool:
    """:func:`_accepts`, a yes remembered beside the archive against its identity (the
    archive's directory is already named by the JDK and the jars: ``_archive_key``)."""
    accepted = archive.parent / f"accepted-{role}"
    identity = _stat_key(archive, *classpath.split(":"))
    with contextlib.suppress(OSError):
        if accepted.read_text() == identity:
            return True
    if not _accepts(java, archive, classpath):
        return False
    with contextlib.suppress(OSError):
        replace_file(accepted, identity.encode())
    return True


def _accepts(java: str, archive: Path, classpath: str) -> bool:
    """Whether the JVM maps ``archive`` with this classpath (``-Xshare:on`` fails if not)."""
    argv = (java, *_DUMP_FLAGS, "-Xshare:on", f"-XX:SharedArchiveFile={archive}")
    try:
        done = subprocess.run(  # noqa: S603 - argv list of the host's java
            (*argv, "-cp", classpath, "-version"), capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _archive_key(cds: Path, java: str, jars: str, training: str) -> str:
    """A hash of what an archive depends on: the JDK's build, the jars, the training.

    Computed once per set of files: remembered in ``cds/keys`` under their identities.
    """
    home = Path(java).resolve().parent.parent
    files = [java, str(home / "lib" / "modules"), str(home / "lib" / "server" / "libjvm.so")]
    identity = _stat_key(*files, *jars.split(":"))
    memo = (
        cds
        / "keys"
        / hashlib.sha256(f"{identity}\0{training}\0{JVM_FLAGS}".encode()).hexdigest()[:32]
    )
    with contextlib.suppress(OSError):
        return memo.read_text()
    digest = hashlib.sha256()
    version = subprocess.run(  # noqa: S603 - the host's resolved java binary
        (java, "-version"), capture_output=True, timeout=60, check=True
    )
    digest.update(java.encode() + b"\0" + version.stderr + b"\0" + training.encode())
    digest.update("\0".join(JVM_FLAGS).encode())
    for jar in jars.split(":"):
        stat = os.stat(jar)
        digest.update(f"\0{jar}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
        with open(jar, "rb") as file:
            digest.update(hashlib.file_digest(file, "sha256").digest())
    key = digest.hexdigest()[:24]
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        replace_file(memo, key.encode())
    return key


def _stat_key(*paths: str | Path) -> str:
    """The identity of files as ``stat`` gives it: device, inode, size, mtime and ctime
    (an absent file counts as one). A file replaced or rewritten gets a new one: a
    package upgrade writes new inodes, and an edit in place moves ctime."""
    parts = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            parts.append(f"{path}:absent")
            continue
        parts.append(
            f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
        )
    return "\n".join(parts)
