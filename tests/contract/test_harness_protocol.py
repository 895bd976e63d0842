"""The harness protocol from both sides: each in-sandbox harness run from the worker's
structs (:mod:`sandbox_workers.judging.protocol`), its records decoded with them.

Python and JavaScript get the same suites, mode by mode (function calls, asserts,
HumanEval's ``check``; stdin tests and compiled assert suites are Python's alone),
through :meth:`HarnessPlan.files` and :func:`parse_records`, the worker's own path.
Each harness starts as the jail starts it (its language's argv, environment and
support files) but outside the jail: the protocol is the subject here, the
isolation is tests/sandbox's.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sandbox_workers.judging.harness import (
    HarnessPlan,
    TestCodeCache,
    markers_stdin,
    new_markers,
    parse_records,
)
from sandbox_workers.judging.protocol import HarnessRecord, HarnessSpec
from sandbox_workers.languages import LANGUAGES
from schemas import Limits

LANGUAGES_WITH_HARNESS = ("python", "javascript")
# Keys a record may carry: the fields of HarnessRecord, as they are spelled in JSON.
RECORD_KEYS = frozenset(field.encode_name for field in msgspec.structs.fields(HarnessRecord))

# twice(x): [x, 2x]; raises for x < 0; for 0 a value without a JSON form.
CALLED = {
    "python": (
        "def twice(x):\n"
        "    if x < 0:\n"
        "        raise ValueError('negative')\n"
        "    return object() if x == 0 else [x, 2 * x]\n"
    ),
    "javascript": (
        "function twice(x) {\n"
        "  if (x < 0) throw new Error('negative');\n"
        "  if (x === 0) { const o = {}; o.self = o; return o; }\n"
        "  return [x, 2 * x];\n"
        "}\n"
    ),
}
# The same asserts in each language: the first holds, the second does not.
ASSERTS = {
    "python": ("", ["assert twice(1) == [1, 2]", "assert twice(2) == [2, 5]"]),
    "javascript": (
        "const assert = require('node:assert');\n",
        ["assert.deepStrictEqual(twice(1), [1, 2]);", "assert.deepStrictEqual(twice(2), [2, 5]);"],
    ),
}
CHECK = {
    "python": "def check(candidate):\n    assert candidate(3) == [3, 6]\n",
    "javascript": (
        "const assert = require('node:assert');\n"
        "function check(candidate) { assert.deepStrictEqual(candidate(3), [3, 6]); }\n"
    ),
}


@dataclass(frozen=True)
class Reported:
    """What one harness execution reported: each test's record, and the raw JSON."""

    records: list[HarnessRecord | None]
    raw: list[dict[str, Any]]
    returncode: int

    @property
    def verdicts(self) -> list[str | None]:
        return [None if record is None else record.verdict for record in self.records]


def run_harness(
    workdir: Path,
    plan: HarnessPlan,
    source: str,
    *,
    stop_on_failure: bool = False,
    spec: bytes | None = None,
) -> Reported:
    """Run ``plan`` in its language's harness, as the jail would launch it."""
    language = LANGUAGES[plan.language]
    toolchain = language.discover(workdir, workdir)  # python and node fetch nothing
    if toolchain is None:
        pytest.fail(f"no {plan.language} toolchain on this host (see rewardbus doctor)")
    files = dict(plan.files(source, budget_s=10.0, stop_on_failure=stop_on_failure))
    if spec is not None:
        files["spec.json"] = spec
    launch = language.launch(toolchain, plan.entry, Limits())
    for name, content in {**files, **launch.files}.items():
        (workdir / name).write_bytes(content)
    markers = new_markers(len(plan.tests))
    done = subprocess.run(
        launch.argv,
        cwd=workdir,
        env=dict(launch.env),
        input=markers_stdin(markers),
        capture_output=True,
        timeout=60,
        check=False,
    )
    tags = tuple(marker.encode() + b" " for marker in markers)
    raw = [
        json.loads(line.partition(b" ")[2])
        for line in done.stdout.split(b"\n")
        if line.startswith(tags)
    ]
    return Reported(parse_records(done.stdout, markers), raw, done.returncode)


def assert_protocol(reported: Reported) -> None:
    """The harness ended cleanly and wrote nothing the record struct would drop."""
    assert reported.returncode == 0
    for raw in reported.raw:
        assert set(raw) <= RECORD_KEYS, raw


def assert_timed(record: HarnessRecord | None) -> None:
    assert record is not None and record.wall_ms > 0 and record.peak_memory_kb > 0


@pytest.mark.parametrize("language", LANGUAGES_WITH_HARNESS)
def test_function_calls(tmp_path: Path, language: str) -> None:
    plan = HarnessPlan(language, "call", [[1], [-1], [0], 2], 5.0, 256, fn_name="twice")
    reported = run_harness(tmp_path, plan, CALLED[language])
    assert_protocol(reported)
    assert reported.verdicts == ["returned", "runtime_error", "returned", "returned"]
    first, raised, unserialisable, bare = reported.records
    assert first is not None and first.value == [1, 2]
    assert raised is not None and "negative" in raised.message
    assert unserialisable is not None and unserialisable.value is msgspec.UNSET
    assert unserialisable.value_repr  # what it looked like instead
    assert bare is not None and bare.value == [2, 4]  # a single argument, not a list of them
    for record in reported.records:
        assert_timed(record)


@pytest.mark.parametrize("language", LANGUAGES_WITH_HARNESS)
def test_stop_on_failure(tmp_path: Path, language: str) -> None:
    plan = HarnessPlan(language, "call", [[1], [-1], [2]], 5.0, 256, fn_name="twice")
    reported = run_harness(tmp_path, plan, CALLED[language], stop_on_failure=True)
    assert_protocol(reported)
    assert reported.verdicts == ["returned", "runtime_error", None]


@pytest.mark.parametrize("language", LANGUAGES_WITH_HARNESS)
def test_asserts(tmp_path: Path, language: str) -> None:
    setup, cases = ASSERTS[language]
    plan = HarnessPlan(language, "assert", list(cases), 5.0, 256, setup=setup)
    reported = run_harness(tmp_path, plan, CALLED[language])
    assert_protocol(reported)
    assert reported.verdicts == ["accepted", "wrong_answer"]
    for record in reported.records:
        assert_timed(record)


@pytest.mark.parametrize("language", LANGUAGES_WITH_HARNESS)
def test_check_of_an_entry_point(tmp_path: Path, language: str) -> None:
    plan = HarnessPlan(
        language, "assert", [None], 5.0, 256, setup=CHECK[language], entry_point="twice"
    )
    assert_protocol(passed := run_harness(tmp_path, plan, CALLED[language]))
    assert passed.verdicts == ["accepted"]
    wrong = CALLED[language].replace("2 * x", "3 * x")
    assert run_harness(tmp_path, plan, wrong).verdicts == ["wrong_answer"]


def test_compiled_asserts(tmp_path: Path) -> None:
    """A Python assert suite the worker compiled: the spec names its file, not its code."""
    setup, cases = ASSERTS["python"]
    tests: list[Any] = list(cases)
    compiled = TestCodeCache().get(setup, tests, protect_builtins=False)
    plan = HarnessPlan("python", "assert", tests, 5.0, 256, compiled=compiled)
    reported = run_harness(tmp_path, plan, CALLED["python"])
    assert_protocol(reported)
    assert reported.verdicts == ["accepted", "wrong_answer"]


def test_stdin_tests(tmp_path: Path) -> None:
    program = "import sys\nn = int(input())\nprint(2 * n)\nsys.exit(3 if n < 0 else 0)\n"
    plan = HarnessPlan("python", "stdin", ["1\n", "-2\n"], 5.0, 256, output_bytes=1024)
    reported = run_harness(tmp_path, plan, program)
    assert_protocol(reported)
    assert reported.verdicts == ["exited", "exited"]
    ok, failed = reported.records
    assert ok is not None and failed is not None
    assert (ok.exit, ok.signal, ok.limit, ok.oom) == (0, None, None, False)
    assert base64.b64decode(ok.stdout) == b"2\n"
    assert failed.exit == 3 and base64.b64decode(failed.stdout) == b"-4\n"
    assert_timed(ok)
    # Each test's wait for a CPU reaches the worker, which credits it as the harness does.
    assert all("waited_ms" in raw for raw in reported.raw), reported.raw
    assert [r.waited_ms for r in reported.records if r] == [r["waited_ms"] for r in reported.raw]


@pytest.mark.parametrize("language", LANGUAGES_WITH_HARNESS)
def test_every_spec_key_is_required(tmp_path: Path, language: str) -> None:
    """A harness defaults nothing: without its keys, every test reports the spec's fault,
    naming each key the harness looks for, which are the HarnessSpec's."""
    plan = HarnessPlan(language, "call", [[1], [2]], 5.0, 256, fn_name="twice")
    reported = run_harness(tmp_path, plan, CALLED[language], spec=b"{}")
    assert_protocol(reported)
    assert reported.verdicts == ["sandbox_error", "sandbox_error"]
    message = reported.records[0].message if reported.records[0] is not None else ""
    assert message == "spec.json lacks " + ", ".join(HarnessSpec.__struct_fields__)


def test_python_values_beyond_json_travel_both_ways(tmp_path: Path) -> None:
    """NaN and the infinities: a suite may hold them (MessagePack does), and Python's
    json writes and reads them, so the Python harness gets them and gives them back."""
    plan = HarnessPlan("python", "call", [[math.inf], [math.nan]], 5.0, 256, fn_name="twice")
    reported = run_harness(tmp_path, plan, CALLED["python"])
    assert_protocol(reported)
    infinite, nan = reported.records
    assert infinite is not None and infinite.value == [math.inf, math.inf]
    assert nan is not None and all(map(math.isnan, nan.value))
