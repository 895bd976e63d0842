"""Content fingerprints: what makes two executions interchangeable.

Two completions with the same fingerprint run the same program, in the same
language and runtime, against the same tests under the same limits, so one
judged result can stand for both (DESIGN.md §5, the result cache).

The code is normalised *conservatively*: a normalisation that merged two
programs that behave differently would hand one of them a wrong reward, while a
missed normalisation only costs a cache miss. So only differences that the
toolchains themselves ignore are folded:

- CRLF becomes LF, for languages whose compilers and interpreters translate it
  anyway (Python, JavaScript, Java, Go, Rust, C, C++); never for shell or SQL,
  where a carriage return is part of a command or a string.
- Spaces and tabs at the end of a line are dropped, unless the line then ends in
  a backslash (``\\`` + space is a syntax error in Python, an escaped space in
  a JavaScript string; dropping the space would turn it into a line continuation).
  Other Unicode spaces are kept: a stray U+00A0 is a syntax error in Python.
- Blank lines before the first and after the last non-blank line are dropped.

Known residue: trailing spaces inside a string literal that spans lines (a
Python triple-quoted string, a shell here-document) are dropped too, and
dropping leading blank lines shifts line numbers in tracebacks. Neither changes
a verdict unless a test compares such output byte for byte; this is accepted
for the hit rate.
"""

from __future__ import annotations

import hashlib

import msgspec

from schemas import Limits

__all__ = ["FINGERPRINT_VERSION", "fingerprint", "normalize_code"]

# Part of every fingerprint: bump it whenever normalisation or the canonical
# encoding changes, or judging gives the same inputs another verdict, so old cache
# entries can never match new programs. fp/2: time limits are CPU time with a wall
# backstop (the worker's runtime_version is the package's, which did not change).
# fp/3: C and C++ assert suites undefine NDEBUG before the tests, Rust ones define the
# assert macros again (a program defining NDEBUG or its own asserts passed them all).
# fp/4: C, C++ and Rust assert suites link exit, _exit, _Exit, quick_exit and (main
# thread) pthread_exit to a guard that fails the test; Go and Java ones pass only when
# the tests' main returned and a secret marker was printed after it (a program exiting 0
# before the asserts ran passed them all). fp/5: C, C++ and Rust need the marker too (a
# raw exit_group system call passed fp/4's guard). fp/6: C, C++ and Rust print it once
# main returned (fp/5 printed it from a destructor, which libc's exit reached by
# __real_exit or dlsym ran too), and no language's binary holds it as text. fp/7: Python
# assert suites fail a value whose comparison is not an equality (an always-true __eq__,
# __lt__, a constant __sub__ or a program's own abs passed them). fp/8: and the links of
# a chained comparison (``0 <= f(x) < n`` passed with an always-true __le__). fp/9: a
# function-call test passes only by its returned value (a Python function that replaced
# json.dumps made its test's record say "accepted", and passed). fp/10: a JavaScript
# function named ``f``, ``args`` or ``exported`` is found (the call wrapper's own names
# shadowed it: every test was runtime_error).
FINGERPRINT_VERSION = "rewardbus-fp/10"

# Canonical language names (Language.name) whose toolchains read CRLF as LF.
_CRLF_AGNOSTIC = frozenset({"python", "javascript", "java", "go", "rust", "c", "cpp"})

_encoder = msgspec.msgpack.Encoder(order="deterministic")


def fingerprint(
    language: str, code: str, suite_digest: str, limits: Limits, runtime_version: str
) -> str:
    """The sha256 fingerprint of one execution, as ``sha256:<hex>``.

    ``language`` should be the canonical name (``Language.name``: ``python``,
    not ``py3``); ``code`` is the program as extracted from the response;
    ``suite_digest`` comes from :func:`schemas.suite_digest` (or the problem
    record); ``runtime_version`` must change whenever the toolchain, the
    harness or the judging logic changes what a program's verdict would be.
    """
    lang = language.strip().lower()
    canonical = _encoder.encode(
        (
            FINGERPRINT_VERSION,
            lang,
            normalize_code(lang, code),
            suite_digest,
            _canonical_limits(limits),
            runtime_version,
        )
    )
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def normalize_code(language: str, code: str) -> str:
    """``code`` with the differences its toolchain ignores folded (see the module doc)."""
    if language.strip().lower() in _CRLF_AGNOSTIC:
        code = code.replace("\r\n", "\n")
    lines = [_strip_line_end(line) for line in code.split("\n")]
    first = next((i for i, line in enumerate(lines) if line), len(lines))
    last = max((i for i, line in enumerate(lines) if line), default=-1)
    body = lines[first : last + 1]
    return "\n".join(body) + "\n" if body else ""


def _strip_line_end(line: str) -> str:
    stripped = line.rstrip(" \t")
    # "\\ " must not become "\\" + newline: that is a different program.
    return line if stripped.endswith("\\") else stripped


def _canonical_limits(limits: Limits) -> dict[str, object]:
    """Every limit by name, numbers as floats: ``Limits(time_s=2)`` equals ``Limits(time_s=2.0)``.

    Defaults are included, so a limit added later changes every fingerprint
    (a miss) rather than silently matching results judged without it.
    """
    values = msgspec.structs.asdict(limits)
    return {
        name: float(value)
        if isinstance(value, int | float) and not isinstance(value, bool)
        else value
        for name, value in values.items()
    }
