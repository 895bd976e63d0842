"""The harness protocol: what the worker tells an in-sandbox harness, and what each test reports.

The harnesses (:mod:`.pyharness`, :mod:`.jsharness`) run inside the jail on their
language's standard library alone, so on their side these are plain JSON:

- ``spec.json`` is a :class:`HarnessSpec`, every field present. A harness
  defaults nothing: a key it does not find is a protocol error, which it reports
  as a ``sandbox_error`` record for every test.
- stdin: one random marker per test, :data:`MARKER_HEX_DIGITS` hex digits and a
  newline (``marker_bytes`` in the spec).
- stdout: after test *i* has finished, one line ``<marker i> <json record>``; the
  record is a :class:`HarnessRecord`.

The worker side builds the spec once per execution (:meth:`HarnessPlan.files
<sandbox_workers.judging.harness.HarnessPlan.files>`) and decodes each record
with :func:`decode_record`. tests/contract/test_harness_protocol.py runs both
harnesses from these structs and decodes what they report with them.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import msgspec

__all__ = [
    "MARKER_HEX_DIGITS",
    "STDERR_TAIL_BYTES",
    "HarnessRecord",
    "HarnessSpec",
    "Mode",
    "decode_record",
    "encode_spec",
]

Mode = Literal["call", "assert", "stdin"]

# A test's marker: 16 random bytes as hex (and a newline on the harness's stdin).
MARKER_HEX_DIGITS = 32
# Of a stdin test's stderr, its record carries the last this many bytes.
STDERR_TAIL_BYTES = 8192

_NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class HarnessSpec(msgspec.Struct, frozen=True, kw_only=True):
    """``spec.json``: everything a harness needs besides the files it names.

    No field has a default, here or in the harnesses: each execution states them all.
    ``tests``: call, each call's arguments; assert, each case's code, or None for
    the single ``check(entry_point)`` test; stdin, each test's input. An assert
    suite the worker compiled (Python) travels as ``compiled``, the file holding
    the marshalled ``pyharness.compile_suite`` result, with the ``guard_names`` it
    was compiled with, instead of ``tests`` (None) and ``setup`` (empty). A Python
    program the worker compiled travels as ``program_code`` too (the marshalled code
    object of ``source``), which the harness loads instead of compiling ``source``.
    Per test: ``time_s`` of CPU time, ``memory_mb``, and the wall-clock backstop
    ``max(wall_factor * time_s, time_s + wall_extra_s)`` with its cap,
    ``wall_stretch`` times that (:class:`~sandbox_workers.sandbox.WallBackstop`);
    each test is charged to ``budget_s`` (what is left of the completion's total
    time) its CPU time or its wall time less its wait for a CPU, whichever is more.
    """

    mode: Mode
    source: str  # the program's file name
    count: int  # tests: one marker on stdin, one record on stdout each
    tests: list[Any] | None
    time_s: float
    memory_mb: int
    wall_factor: float
    wall_extra_s: float
    wall_stretch: float
    budget_s: float
    stop_on_failure: bool
    marker_bytes: int  # a marker line on stdin
    fn_name: str | None  # call: the function called
    setup: str  # assert: test code run after the program
    entry_point: str | None  # assert: the candidate of HumanEval's check(candidate)
    compiled: str | None
    guard_names: tuple[str, str, str] | None
    program_code: str | None  # Python: the file of the program's code, compiled by the worker
    output_bytes: int | None  # stdin: each stream of a test is capped at this
    stderr_tail_bytes: int  # stdin: how much of the end of its stderr a record carries


class HarnessRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One test's record, as a harness reports it.

    ``verdict`` is a :class:`~schemas.Verdict` value, or ``"returned"`` (a call's
    value, judged by the worker) or ``"exited"`` (a stdin test's run, judged by the
    worker as a jail's result). A verdict outside those is the runner's to refuse.
    """

    verdict: str
    message: str = ""
    # returned: the call's value; unset when it has no JSON form (then its repr).
    value: Any | msgspec.UnsetType = msgspec.UNSET
    value_repr: str | None = msgspec.field(default=None, name="repr")
    # The harness's own measurements of the test.
    wall_ms: _NonNegative = 0.0
    cpu_ms: _NonNegative = 0.0
    # Of wall_ms, the time the test waited for a CPU: not charged to the suite's budget.
    waited_ms: _NonNegative = 0.0
    peak_memory_kb: Annotated[int, msgspec.Meta(ge=0)] = 0
    # exited: how the run ended, and its output (base64).
    exit: int | None = None
    signal: int | None = None
    limit: Literal["cpu", "wall", "output"] | None = None
    oom: bool = False
    stdout: str = ""
    stderr: str = ""


def encode_spec(spec: HarnessSpec) -> bytes:
    """``spec.json``'s bytes.

    With the standard library's encoder: a suite's values are any MessagePack
    value, and ``msgspec.json`` would write NaN and the infinities as null, where
    Python's ``json`` writes ``NaN`` and ``Infinity`` and the Python harness reads
    them back as themselves.
    """
    return json.dumps(msgspec.structs.asdict(spec)).encode()


def decode_record(body: bytes) -> HarnessRecord | None:
    """A record line's JSON as a :class:`HarnessRecord`; None when it is no record at all.

    Not JSON, not an object, no verdict: not a record (the program's output, or a
    test that reported nothing). A record whose fields are not what the protocol
    says (only a program that rewrote the harness inside its own test can make one)
    becomes a ``sandbox_error`` record saying so, as an unknown verdict does.
    """
    try:
        return _RECORDS.decode(body)
    except (msgspec.DecodeError, RecursionError):
        pass  # rare: looked at again, as Python's json reads it
    try:
        # A call's value may be NaN or an infinity, which Python's json writes and reads.
        raw = json.loads(body)
    except (ValueError, RecursionError):  # a value nested deeper than this stack allows
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("verdict"), str):
        return None
    try:
        return msgspec.convert(raw, HarnessRecord)
    except msgspec.ValidationError as exc:
        return HarnessRecord(verdict="sandbox_error", message=f"malformed harness record: {exc}")


_RECORDS = msgspec.json.Decoder(HarnessRecord)
