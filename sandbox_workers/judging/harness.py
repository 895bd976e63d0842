"""Worker side of the in-sandbox harnesses: the files to send and the records back.

For function-call and assert suites all tests of a completion run in one
execution (:mod:`.pyharness`, :mod:`.jsharness`); so do a Python program's
stdin/stdout tests (:func:`stdin_harness_languages`), each test's output coming
back in its record. The expected outputs never enter the sandbox: a call's
return value, or a test's output, comes back and is compared here, so a
program cannot read the answers it is judged against.
"""

from __future__ import annotations

import functools
import json
import marshal
import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from sandbox_workers.compile_cache import artifact_key
from sandbox_workers.judging import pyharness
from sandbox_workers.judging.jsharness import JS_HARNESS
from sandbox_workers.languages import utf8
from sandbox_workers.lru import ByteLRU
from sandbox_workers.sandbox import DEFAULT_BACKSTOP, WallBackstop

__all__ = [
    "CompiledTests",
    "HarnessPlan",
    "TestCodeCache",
    "harness_languages",
    "new_markers",
    "parse_records",
    "stdin_harness_languages",
    "strip_markers",
]

# Must match MARKER_BYTES in the harnesses: 16 random bytes as hex, and a newline.
_MARKER_HEX_BYTES = 16

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
    mode: Literal["call", "assert", "stdin"]
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
    ) -> dict[str, bytes]:
        """The harness, the program and the spec, for the work directory.

        ``budget_s`` is what is left of the completion's total time: the harness
        reports the tests it has no time for as not run. Per test, ``time_s`` is
        CPU time with ``backstop`` for a wall-clock limit, and the budget is
        charged as :class:`~sandbox_workers.judging.scoring.Budget` charges it.
        """
        script, program = _SCRIPTS[self.language]
        spec = {
            "mode": self.mode,
            "source": program,
            "tests": self.tests,
            "time_s": self.time_s,
            "wall_factor": backstop.factor,
            "wall_extra_s": backstop.extra_s,
            "wall_stretch": backstop.stretch,
            "memory_mb": self.memory_mb,
            "fn_name": self.fn_name,
            "setup": self.setup,
            "entry_point": self.entry_point,
            "budget_s": budget_s,
            "stop_on_failure": stop_on_failure,
        }
        if self.output_bytes is not None:
            spec["output_bytes"] = self.output_bytes
        files = {script: _harness_source(self.language), program: utf8(source)}
        if self.compiled is not None:
            del spec["tests"], spec["setup"]
            spec.update(
                count=len(self.tests),
                compiled="tests.marshal",
                guard_names=list(self.compiled.guard_names),
            )
            files["tests.marshal"] = self.compiled.code
        files["spec.json"] = json.dumps(spec).encode()
        return files


def new_markers(count: int) -> list[str]:
    """Fresh random markers, one per test, for one execution."""
    return [secrets.token_hex(_MARKER_HEX_BYTES) for _ in range(count)]


def markers_stdin(markers: list[str]) -> bytes:
    """The harness's stdin: the markers, one per line."""
    return "".join(f"{marker}\n" for marker in markers).encode()


def parse_records(stdout: bytes, markers: list[str]) -> list[dict[str, Any] | None]:
    """The record of each test, in order; None where a test reported nothing.

    Only the first line carrying a test's marker counts.
    """
    wanted = {marker.encode(): index for index, marker in enumerate(markers)}
    records: list[dict[str, Any] | None] = [None] * len(markers)
    for line in stdout.split(b"\n"):
        head, _, body = line.partition(b" ")
        index = wanted.get(head)
        if index is None or records[index] is not None:
            continue
        try:
            record = json.loads(body)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("verdict"), str):
            records[index] = record
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
