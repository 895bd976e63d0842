"""What every language provides: toolchain discovery, a compile step, a launch command.

A :class:`Language` is a stateless description. Discovery (once, at start-up)
turns it into a :class:`Toolchain`: absolute paths that are the same on the host
and inside the jail, the bind mounts that make them visible there, and a
version string that goes into compile-cache keys.

Every path handed to the jail is absolute and resolved (no symlinks such as the
``rustup`` proxy or ``/usr/bin/java -> /etc/alternatives/...``), because the
jail shows host paths at the same place and a symlink's target may not be
mounted.
"""

from __future__ import annotations

import abc
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from sandbox_workers.sandbox import BindMount
from schemas import Limits

__all__ = [
    "BASE_ENV",
    "WORKDIR",
    "CompileStep",
    "Language",
    "Launch",
    "Toolchain",
    "byte_list",
    "masked_marker",
    "probe_version",
    "read_only",
    "resolve_binary",
    "utf8",
]

# The jail's private work directory; also the cwd of every execution.
WORKDIR = "/work"

# The whole environment of an execution (the jail passes nothing else through):
# no host variable, and so no credential, can leak in.
BASE_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": WORKDIR,
    "TMPDIR": WORKDIR,
}


@dataclass(frozen=True)
class Toolchain:
    """A language's compiler or interpreter as found on this host.

    ``paths`` maps a role (``"python"``, ``"javac"``...) to an absolute path
    that is valid inside the jail once ``mounts`` are applied. ``compile_mounts``
    are needed by the compile step only (e.g. Go's writable build cache).
    """

    language: str
    version: str
    paths: Mapping[str, str]
    mounts: tuple[BindMount, ...] = ()
    compile_mounts: tuple[BindMount, ...] = ()


@dataclass(frozen=True)
class CompileStep:
    """How to turn a source file into artifacts, inside the jail.

    ``entry`` is what :meth:`Language.launch` runs afterwards (a binary name, a
    Java class); ``collect`` are the globs read back as artifacts; names in
    ``executables`` get mode 0755 when the artifacts are placed for a run.
    """

    argv: tuple[str, ...]
    entry: str
    collect: tuple[str, ...]
    executables: frozenset[str] = frozenset()
    env: Mapping[str, str] = field(default_factory=dict)
    max_processes: int = 128
    # See Launch.reserve_mb: the JVM (javac) and Go reserve address space.
    reserve_mb: int = 0


@dataclass(frozen=True)
class Launch:
    """How to start a prepared program: the command and what the runtime needs.

    ``memory_overhead_mb`` is added to the test's memory limit for runtimes whose
    own footprint should not count against the program (the JVM's metaspace and
    code cache, V8's isolate); the program's heap is capped separately by the
    runtime's own flag (``-Xmx``, ``--max-old-space-size``).

    ``reserve_mb`` is address space the runtime reserves at start-up and never
    touches (thread stacks, heap arenas, V8's code range). It costs nothing
    under a cgroup memory limit, but a sandbox that falls back to RLIMIT_AS
    (no cgroup memory controller) must add it, or the runtime cannot start.

    ``warm_after`` names the file (in the work directory) the interpreter opens
    first once it has started up, for runtimes a warm pool can fork there: a
    single-threaded interpreter whose start-up reads nothing of the execution's
    (:mod:`sandbox_workers.pool`). None: every execution starts it afresh.
    ``warm_on_read``: the interpreter opens that file (with ``fopen``) before it
    has started up and reads it after (R): the fork is at its first read.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    memory_overhead_mb: int = 0
    reserve_mb: int = 0
    max_processes: int = 64
    # Support files the runtime loads (written into the work directory).
    files: Mapping[str, bytes] = field(default_factory=dict)
    warm_after: str | None = None
    warm_on_read: bool = False


class Language(abc.ABC):
    """One supported language. Subclasses are small and stateless."""

    name: ClassVar[str]
    # Names a Completion may use for this language (``"py"``, ``"c++"``...).
    aliases: ClassVar[frozenset[str]]
    # Tags of fenced code blocks that hold this language's code.
    fence_tags: ClassVar[frozenset[str]]
    extension: ClassVar[str]
    # "rows": stdout is a result set, compared row by row (SQL); else text.
    output_kind: ClassVar[str] = "text"
    # Put between the program and the test code of a compiled assert suite (they are one
    # source file, the program first): undoes what a program could do to the tests.
    test_prelude: ClassVar[str] = ""
    # Added to the compile command of such a suite only (never of a stdin/stdout program,
    # which may exit as it likes): the link flags the prelude's exit guard needs.
    test_compile_args: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        """Find the toolchain on this host; None when it is not installed.

        ``state_dir`` is a private, persistent directory the toolchain may use
        (Go keeps its build cache there). ``fetched`` is where ``make toolchains``
        puts the toolchains no distribution package provides, one directory each
        (``typescript/``, ``kotlin/``...: infra/toolchains/fetch.sh).
        """

    def prepare_source(self, source: str) -> str:
        """The source as it is compiled or run (by default unchanged)."""
        return source

    def source_name(self, source: str) -> str:
        """File name of the source inside the work directory."""
        del source
        return f"main.{self.extension}"

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep | None:
        """The compile command, or None for interpreted languages."""
        del toolchain, source_name
        return None

    def test_io(self, source: str, test_input: str) -> tuple[bytes, Mapping[str, bytes]]:
        """stdin and extra files for one stdin/stdout test: by default the input is stdin."""
        del source
        return utf8(test_input), {}

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        """Compiled assert-suite test code that prints ``marker`` on stderr after its main returns.

        Catches exits that no wrapper sees (a system call, an exec): a test then passes only
        when it exits 0 *and* the marker is in its stderr. None (the default): no marker is
        expected.
        """
        del tests, marker
        return None

    @abc.abstractmethod
    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        """The command that runs ``entry`` (a script, a binary, a class)."""


def masked_marker(marker: str) -> tuple[bytes, bytes]:
    """``"\\n<marker>\\n"`` XORed with a key drawn from the marker, and that key.

    Test code XORs the two back together after the tests' main returned and prints the
    result, so neither the binary nor the class file holds the marker as text for a
    program to read out of itself and print. Obfuscation, not secrecy: a program that
    knows this scheme can undo it (nothing inside the program's own process is secret
    from it); one that searches itself for a marker-shaped string finds none.
    """
    text = f"\n{marker}\n".encode("ascii")
    key = hashlib.shake_256(b"rewardbus tests-end mask\0" + text).digest(len(text))
    return bytes(a ^ b for a, b in zip(text, key, strict=True)), key


def byte_list(data: bytes, *, signed: bool = False) -> str:
    """``data`` as comma-separated integers, for an array literal in test code (``signed``:
    -128..127, Java's byte)."""
    return ",".join(str(byte - 256 if signed and byte > 127 else byte) for byte in data)


def utf8(text: str) -> bytes:
    """Text for the sandbox as UTF-8; lone surrogates pass through, never raise.

    Completions decoded from JSON may carry unpaired surrogates; a program (or
    test) holding one is still judged (its compiler rejects it), not dropped.
    """
    return text.encode("utf-8", errors="surrogatepass")


def resolve_binary(name: str) -> Path | None:
    """``shutil.which`` followed by symlink resolution; None when absent."""
    found = shutil.which(name)
    if found is None:
        return None
    return Path(found).resolve()


def probe_version(
    argv: list[str], *, prefix: str = "", env: Mapping[str, str] | None = None
) -> str | None:
    """First non-empty output line of a trusted host tool (``--version``).

    Runs at start-up only, on the host's own toolchain binaries (never on
    untrusted input), with an argv list and a minimal environment.
    """
    try:
        done = subprocess.run(  # noqa: S603 - argv list of a resolved host toolchain binary
            argv,
            capture_output=True,
            timeout=30,
            check=False,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **(env or {})},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    for line in (done.stdout + done.stderr).decode(errors="replace").splitlines():
        if line.strip():
            return prefix + line.strip()
    return None


def discover_binary(
    language: str,
    binary: str,
    version_args: Sequence[str],
    *,
    version: Callable[[str], str],
    key: str | None = None,
    mounts: Callable[[Path], tuple[BindMount, ...]] | None = None,
) -> Toolchain | None:
    """The toolchain of a language that one host binary runs, or None when absent.

    ``version`` turns the tool's first output line into the version recorded in
    cache keys; ``mounts`` (default: the binary itself) is what the jail must show;
    ``key`` names the binary in ``Toolchain.paths`` (default: ``binary``).
    """
    path = resolve_binary(binary)
    if path is None:
        return None
    banner = probe_version([str(path), *version_args])
    if banner is None:
        return None
    return Toolchain(
        language=language,
        version=version(banner),
        paths={key or binary: str(path)},
        mounts=mounts(path) if mounts is not None else read_only(path),
    )


def read_only(*paths: Path | str) -> tuple[BindMount, ...]:
    """Read-only bind mounts of host paths at the same place, without duplicates.

    A path inside another listed path is dropped: the outer mount covers it.
    """
    unique = sorted({Path(os.path.realpath(p)) for p in paths if Path(p).exists()})
    kept: list[Path] = []
    for path in unique:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return tuple(BindMount(host=p, target=str(p)) for p in kept)


def last_line_at(source: str, line: str) -> int | None:
    """Offset in ``source`` of its last line that is exactly ``line``, or None."""
    found = None
    offset = 0
    for each in source.splitlines(keepends=True):
        if each.rstrip("\r\n") == line:
            found = offset
        offset += len(each)
    return found


def split_compile_script(source: str, head: str, tail: str, *inputs: str) -> str:
    """A constant ``sh -c`` script: split ``source`` at its last line equal to ``$1``.

    What comes before that line goes to ``head``, the line and what follows to
    ``tail``; then the rest of the arguments (the compiler's command line) run with
    ``inputs`` appended. The source is only data to it (Haskell, OCaml: the program
    and its tests become two modules).
    """
    return (
        's=$1; shift; awk -v s="$s" \''
        f'NR == FNR {{ if ($0 == s) n = FNR; next }} FNR < n {{ print > "{head}"; next }}'
        f' {{ print > "{tail}" }}\' '
        f'{source} {source} && exec "$@" {" ".join(inputs)}'
    )
