"""Worker side of the in-sandbox harnesses: the files to send and the records back.

For function-call and assert suites all tests of a completion run in one
execution (:mod:`.pyharness`, :mod:`.jsharness`); so do a Python program's
stdin/stdout tests (:func:`stdin_harness_languages`), each test's output coming
back in its record. The expected outputs never enter the sandbox: a call's
return value, or a test's output, comes back and is compared here, so a
program cannot read the answers it is judged against. What goes in and comes
back is typed in :mod:`.protocol`.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import secrets
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sandbox_workers.compile_cache import artifact_key, replace_file
from sandbox_workers.judging import pyharness
from sandbox_workers.judging.jsharness import JS_HARNESS
from sandbox_workers.judging.protocol import (
    MARKER_HEX_DIGITS,
    STDERR_TAIL_BYTES,
    HarnessRecord,
    HarnessSpec,
    Mode,
    decode_record,
    encode_spec,
)
from sandbox_workers.languages import utf8
from sandbox_workers.lru import ByteLRU
from sandbox_workers.sandbox import DEFAULT_BACKSTOP, WallBackstop

__all__ = [
    "CompiledTests",
    "HarnessPlan",
    "TestCodeCache",
    "harness_languages",
    "kept_harness",
    "new_markers",
    "parse_records",
    "stdin_harness_languages",
    "strip_markers",
]

# Where a compiled assert suite travels (HarnessSpec.compiled), and where the program's
# code object compiled by the worker does (HarnessSpec.program_code).
_COMPILED_TESTS = "tests.marshal"
_PROGRAM_CODE = "solution.marshal"

_SCRIPTS: dict[str, tuple[str, str]] = {
    # language -> (harness file name, program file name). The Python harness goes in
    # compiled (see _harness_source): Python runs a ".marshal" entry without compiling.
    "python": ("harness.marshal", "solution.py"),
    "javascript": ("harness.js", "solution.js"),
}


def harness_languages() -> frozenset[str]:
    """Languages with a function-call / assert harness."""
    return frozenset(_SCRIPTS)


def stdin_harness_languages() -> frozenset[str]:
    """Languages whose harness also runs stdin/stdout tests (a fork per test, not an exec)."""
    return frozenset({"python"})


@dataclass(frozen=True)
class CompiledTests:
    """A Python assert suite's test code, compiled with the guard: marshalled, and its names."""

    code: bytes
    guard_names: tuple[str, str, str]


class TestCodeCache:
    """Python assert suites compiled once per suite, not once per execution.

    Parsing and guarding a suite's comparisons (``pyharness.compile_suite``) took
    ~1.2 ms of a HumanEval execution, more for suites of many asserts, and a GRPO
    group runs one suite for every sample. The sandbox runs this interpreter (see
    :func:`_harness_source`), so it loads the marshalled code as its own.
    """

    __test__ = False  # (not a pytest class, whatever its name)

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self._compiled: ByteLRU[str, CompiledTests | None] = ByteLRU(max_bytes)

    def get(
        self, setup: str, cases: list[str | None], *, protect_builtins: bool
    ) -> CompiledTests | None:
        """The compiled suite; None when it does not compile (the harness then says why)."""
        key = _suite_key(setup, cases, protect_builtins)
        if key in self._compiled:
            return self._compiled.get(key)
        compiled: CompiledTests | None = None
        try:
            code = marshal.dumps(pyharness.compile_suite(setup, cases, protect_builtins))
            compiled = CompiledTests(code, pyharness.guard_names())
        except (SyntaxError, ValueError):
            pass  # rare: the harness compiles it again and reports the error as it did
        self._compiled.put(key, compiled, len(compiled.code) if compiled else len(key))
        return compiled


def _suite_key(setup: str, cases: list[str | None], protect_builtins: bool) -> str:
    # A case is "c" + its code, the single check(candidate) test (None) is "".
    parts = ("" if case is None else "c" + case for case in cases)
    return artifact_key("assert-tests", "protect" if protect_builtins else "plain", setup, *parts)


@dataclass(frozen=True)
class HarnessPlan:
    """Everything one harness execution needs, before markers are drawn."""

    language: str
    mode: Mode
    tests: list[Any]
    time_s: float
    memory_mb: int
    # stdin: each stream of a test is capped at this many bytes.
    output_bytes: int | None = None
    fn_name: str | None = None
    setup: str = ""
    entry_point: str | None = None
    # Python assert suites: the test code already compiled (then sent instead of it).
    compiled: CompiledTests | None = None

    @property
    def alone(self) -> bool:
        """Whether the harness runs this plan's only test in its own process (Python's,
        a function-call or assert test): the execution's limits are the test's."""
        return self.language == "python" and self.mode != "stdin" and len(self.tests) == 1

    @property
    def entry(self) -> str:
        """The harness script's file name (what the interpreter runs)."""
        return _SCRIPTS[self.language][0]

    def files(
        self,
        source: str,
        *,
        budget_s: float,
        stop_on_failure: bool,
        backstop: WallBackstop = DEFAULT_BACKSTOP,
        code: bytes | None = None,
    ) -> dict[str, bytes]:
        """The harness, the program and the spec, for the work directory.

        ``code``: Python's, the program already compiled (``Program.code``), which the
        harness then loads instead of compiling ``source`` (still there, for tracebacks).

        ``budget_s`` is what is left of the completion's total time: the harness
        reports the tests it has no time for as not run. Per test, ``time_s`` is
        CPU time with ``backstop`` for a wall-clock limit, and the budget is
        charged as :class:`~sandbox_workers.judging.scoring.Budget` charges it.
        """
        script, program = _SCRIPTS[self.language]
        compiled = self.compiled
        spec = HarnessSpec(
            mode=self.mode,
            source=program,
            count=len(self.tests),
            tests=self.tests if compiled is None else None,
            time_s=self.time_s,
            memory_mb=self.memory_mb,
            wall_factor=backstop.factor,
            wall_extra_s=backstop.extra_s,
            wall_stretch=backstop.stretch,
            budget_s=budget_s,
            stop_on_failure=stop_on_failure,
            marker_bytes=MARKER_HEX_DIGITS + 1,
            fn_name=self.fn_name,
            setup=self.setup if compiled is None else "",
            entry_point=self.entry_point,
            compiled=None if compiled is None else _COMPILED_TESTS,
            guard_names=None if compiled is None else compiled.guard_names,
            program_code=None if code is None else _PROGRAM_CODE,
            output_bytes=self.output_bytes,
            stderr_tail_bytes=STDERR_TAIL_BYTES,
        )
        files = {
            script: _harness_source(self.language),
            program: utf8(source),
            "spec.json": encode_spec(spec),
        }
        if compiled is not None:
            files[_COMPILED_TESTS] = compiled.code
        if code is not None:
            files[_PROGRAM_CODE] = code
        return files


def new_markers(count: int) -> list[str]:
    """Fresh random markers, one per test, for one execution."""
    return [secrets.token_hex(MARKER_HEX_DIGITS // 2) for _ in range(count)]


def markers_stdin(markers: list[str]) -> bytes:
    """The harness's stdin: the markers, one per line."""
    return "".join(f"{marker}\n" for marker in markers).encode()


def parse_records(stdout: bytes, markers: list[str]) -> list[HarnessRecord | None]:
    """The record of each test, in order; None where a test reported nothing.

    Only the first line carrying a test's marker and a record counts (see
    :func:`~sandbox_workers.judging.protocol.decode_record`).
    """
    wanted = {marker.encode(): index for index, marker in enumerate(markers)}
    records: list[HarnessRecord | None] = [None] * len(markers)
    for line in stdout.split(b"\n"):
        head, _, body = line.partition(b" ")
        index = wanted.get(head)
        if index is None or records[index] is not None:
            continue
        records[index] = decode_record(body)
    return records


def strip_markers(stdout: bytes, markers: list[str]) -> bytes:
    """The program's own output: stdout without the harness's record lines."""
    tags = tuple(marker.encode() + b" " for marker in markers)
    kept: list[bytes] = []
    for line in stdout.split(b"\n"):
        if line.startswith(tags):
            # The harness starts each record with a newline of its own.
            if kept and not kept[-1]:
                kept.pop()
            continue
        kept.append(line)
    return b"\n".join(kept)


def kept_harness(cache_dir: Path) -> Path:
    """The Python harness, byte for byte as this process writes it into executions,
    saved under the jail's ``cache_dir`` for warm zygotes to keep loaded
    (``PoolConfig.keep_code``).

    Named by its digest: marshal's output can differ between processes (it marks
    objects by their reference counts), so each process keeps its own bytes.
    """
    data = _harness_source("python")
    directory = cache_dir / "kept"
    path = directory / f"harness-{hashlib.sha256(data).hexdigest()[:32]}.marshal"
    if not path.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        replace_file(path, data)
    return path


@functools.cache
def _harness_source(language: str) -> bytes:
    """The harness file, read (and for Python compiled) once per process.

    Compiling the 370-line Python harness took ~1.7 ms of every execution's CPU,
    a fifth of a warm HumanEval judgement; its marshalled code object loads in
    ~0.03 ms. The sandbox runs this very interpreter (``languages.python``:
    ``sys.base_prefix``), so the bytecode is the one it would compile itself.
    """
    if language == "javascript":
        return JS_HARNESS.encode()
    source = resources.files(__package__).joinpath("pyharness.py").read_bytes()
    return marshal.dumps(compile(source, "harness.py", "exec", dont_inherit=True))
