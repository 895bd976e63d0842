"""The golden set: programs with known verdicts, stored as TOML data beside this module.

One file per language (``golden/<language>.toml``)::

    language = "python"

    [limits]                          # optional: defaults for every canary of the file
    compile_time_s = 120

    [suites.sum]                      # shared test suites, a schemas.TestSuite each
    kind = "io"
    inputs = ["2 3\\n"]
    outputs = ["5\\n"]

    [[canary]]
    name = "sum-correct"              # unique within the file
    kind = "correct"                  # correct | wrong | slow | crash | hack
    expect = "accepted"               # the verdict a healthy judge gives
    score = 1.0                       # optional: the score it gives
    suite = "sum"                     # or an inline [canary.tests] table
    code = '''...'''
    [canary.limits]                   # optional: schemas.Limits fields, over the defaults
    time_s = 1.0

Each canary's full name is ``<language>/<name>``.
"""

from __future__ import annotations

import enum
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from rewardbus.errors import UsageError
from schemas import Limits, TestSuite, Verdict

__all__ = ["SHIPPED", "Canary", "CanaryKind", "GoldenSetError", "load_golden", "parse_golden"]

SHIPPED = Path(__file__).with_name("golden")
"""The golden set shipped with rewardbus."""


class CanaryKind(enum.StrEnum):
    """What a canary program is, which says what a judge must do with it."""

    CORRECT = "correct"
    WRONG = "wrong"
    SLOW = "slow"
    CRASH = "crash"
    HACK = "hack"  # tries to make the judge pass it without solving the problem


class GoldenSetError(UsageError):
    """A golden-set file that does not describe valid canaries (the message says where)."""


@dataclass(frozen=True)
class Canary:
    """One program with the verdict (and optionally the score) a healthy judge gives it."""

    name: str
    language: str
    kind: CanaryKind
    expect: Verdict
    code: str
    tests: TestSuite
    limits: Limits = field(default_factory=Limits)
    score: float | None = None

    @property
    def full_name(self) -> str:
        """``language/name``, unique across the golden set."""
        return f"{self.language}/{self.name}"


def load_golden(
    directory: Path | None = None, *, languages: Iterable[str] | None = None
) -> tuple[Canary, ...]:
    """Every canary of the golden set (the shipped one by default), ordered by file and position.

    ``languages`` keeps only those languages' files.
    """
    wanted = set(languages) if languages is not None else None
    paths = sorted((directory or SHIPPED).glob("*.toml"))
    canaries: list[Canary] = []
    for path in paths:
        if wanted is not None and path.stem not in wanted:
            continue
        canaries.extend(parse_golden(path.read_text(), source=path.name))
    names = [c.full_name for c in canaries]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise GoldenSetError(f"canary names repeat: {repeated}")
    return tuple(canaries)


def parse_golden(text: str, *, source: str = "<golden>") -> list[Canary]:
    """The canaries of one golden-set file."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GoldenSetError(f"{source}: {exc}") from exc
    language = data.get("language")
    if not isinstance(language, str) or not language:
        raise GoldenSetError(f"{source}: no top-level language")
    suites = {
        name: _suite(raw, f"{source}: suite {name}") for name, raw in data.get("suites", {}).items()
    }
    defaults = data.get("limits", {})
    return [
        _canary(raw, language, suites, defaults, f"{source}: canary #{i + 1}")
        for i, raw in enumerate(data.get("canary", []))
    ]


def _canary(
    raw: Mapping[str, Any],
    language: str,
    suites: Mapping[str, TestSuite],
    defaults: Mapping[str, Any],
    where: str,
) -> Canary:
    fields = dict(raw)
    suite_name = fields.pop("suite", None)
    if suite_name is not None:
        if suite_name not in suites:
            raise GoldenSetError(f"{where}: unknown suite {suite_name!r}")
        tests = suites[suite_name]
    elif "tests" in fields:
        tests = _suite(fields.pop("tests"), where)
    else:
        raise GoldenSetError(f"{where}: neither suite nor tests")
    limits = _limits({**defaults, **fields.pop("limits", {})}, where)
    try:
        canary = Canary(
            name=str(fields.pop("name")),
            language=language,
            kind=CanaryKind(fields.pop("kind")),
            expect=Verdict(fields.pop("expect")),
            code=str(fields.pop("code")),
            tests=tests,
            limits=limits,
            score=_score(fields.pop("score", None), where),
        )
    except (KeyError, ValueError) as exc:
        raise GoldenSetError(f"{where}: {exc}") from exc
    if fields:
        raise GoldenSetError(f"{where}: unknown keys {sorted(fields)}")
    return canary


def _score(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise GoldenSetError(f"{where}: score must be a number in [0, 1], not {value!r}")
    return float(value)


def _suite(raw: object, where: str) -> TestSuite:
    suite: TestSuite = _convert(raw, TestSuite, where)
    return suite


def _limits(raw: object, where: str) -> Limits:
    limits: Limits = _convert(raw, Limits, where)
    return limits


def _convert(raw: object, kind: Any, where: str) -> Any:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise GoldenSetError(f"{where}: {exc}") from exc
