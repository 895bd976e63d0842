"""The verl parity set: rewardbus and verl's ``prime_code`` on the same samples.

The pure half (no verl, no torch, no I/O beyond reading the shipped files): the
cases of ``examples/verl/parity/cases.jsonl``, the data source verl is given for
each, distinct repeats for throughput runs, the disagreements ``docs/verl.md``
documents, and how two scorers' results are compared. The parity test
(``tests/verl/test_parity.py``) and ``benchmarks/bench_verl.py`` share it; the verl
side of both lives in :mod:`benchmarks.verl_harness`.

A case line::

    {"case_id": "apps-stdin-3", "data_source": "apps", "kind": "stdin",
     "response": "```python\\n...\\n```", "ground_truth": ..., "verl_ground_truth": ...,
     "extra_info": {...}, "expected_score": 1.0}

``ground_truth`` is what rewardbus is given, ``verl_ground_truth`` what verl is
given (the same suite in the shape ``prime_code`` reads: ``input_output`` JSON),
and ``expected_score`` the right answer, decided by reading the program.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "SCORE_TOLERANCE",
    "VERL_CODE_SOURCES",
    "Agreement",
    "ParityCase",
    "ParitySample",
    "VerlScore",
    "agreement",
    "distinct_response",
    "documented_disagreements",
    "load_cases",
    "load_verl_scores",
    "repeat_cases",
    "same_score",
    "verl_data_source",
]

# Scores are fractions of tests passed: equal means equal up to float noise.
SCORE_TOLERANCE = 1e-6

# The data sources verl's default_compute_score sends to prime_code (or sandbox_fusion).
VERL_CODE_SOURCES = frozenset({"codecontests", "apps", "codeforces", "taco"})


@dataclass(frozen=True)
class ParityCase:
    """One line of ``cases.jsonl``: a response, its suite in both shapes, the right score."""

    case_id: str
    data_source: str
    kind: str
    response: str
    ground_truth: Any
    verl_ground_truth: Any
    expected_score: float
    extra_info: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> ParityCase:
        """A case from its decoded JSON line; ``KeyError`` names a missing field."""
        return cls(
            case_id=str(line["case_id"]),
            data_source=str(line["data_source"]),
            kind=str(line.get("kind", "")),
            response=str(line["response"]),
            ground_truth=line["ground_truth"],
            verl_ground_truth=line["verl_ground_truth"],
            expected_score=float(line["expected_score"]),
            extra_info=dict(line.get("extra_info") or {}),
        )


@dataclass(frozen=True)
class ParitySample:
    """One sample of a run: a case, maybe as a distinct repeat (its response tagged)."""

    case: ParityCase
    sample_id: str
    response: str


def load_cases(path: Path) -> list[ParityCase]:
    """Every case of a ``cases.jsonl``; raises ``ValueError`` on a duplicate case id."""
    cases = [
        ParityCase.from_json(json.loads(line))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    seen: set[str] = set()
    for case in cases:
        if case.case_id in seen:
            raise ValueError(f"{path}: case id {case.case_id!r} appears twice")
        seen.add(case.case_id)
    return cases


@dataclass(frozen=True)
class VerlScore:
    """One line of ``verl_scores.jsonl``: verl's score for a case, and how long it took.

    ``seen`` holds every distinct score verl gave the case over the recorded passes
    (``score_with_verl.py --repeat/--loaded``); more than one means verl's answer
    depends on timing or on what else its process holds, not on the program alone.
    """

    score: float
    wall_s: float  # the slowest recorded call's wall time, with other calls in flight
    seen: tuple[float, ...] = ()
    unstable_because: str = ""  # why it moved where the recorded passes did not show it

    @property
    def stable(self) -> bool:
        """verl gave this case one score in every recorded pass, and no note says otherwise."""
        return not self.unstable_because and all(
            same_score(other, self.score) for other in self.seen
        )


def load_verl_scores(path: Path) -> dict[str, VerlScore]:
    """``verl_scores.jsonl``: case id -> what verl's ``prime_code`` gave it when recorded."""
    scores: dict[str, VerlScore] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            scores[str(record["case_id"])] = VerlScore(
                float(record["verl_score"]),
                float(record.get("wall_s", 0.0)),
                tuple(float(s) for s in record.get("verl_scores_seen", ())),
                str(record.get("unstable_because", "")),
            )
    return scores


def verl_data_source(case: ParityCase) -> str:
    """The data source verl is given: a code source as is, anything else (mbpp) as "apps".

    verl's ``default_compute_score`` knows no "mbpp" or "humaneval" and raises
    for them; a verl user scoring such a dataset with ``prime_code`` must name a
    code source, and ``verl_ground_truth`` already holds the suite in its shape.
    """
    return case.data_source if case.data_source in VERL_CODE_SOURCES else "apps"


# Line-comment syntax by fence language; anything unknown gets "#" (Python is the default).
_SLASH_COMMENT = frozenset(
    {"c", "cpp", "c++", "cc", "cxx", "java", "javascript", "js", "node", "go", "rust", "rs"}
)
_FENCES = ("```", "~~~")


def distinct_response(response: str, tag: str) -> str:
    """The response with a comment line naming ``tag`` in each code block.

    The comment goes *inside* every fenced block, right after the opening fence
    (both verl's ``prime_code`` and rewardbus judge only a fenced block's code, so
    a comment outside would leave the program, and rewardbus's cache key,
    unchanged); an unfenced response is the program itself and gets it as its
    last line. Never as an unfenced program's first line: ``prime_code`` keeps the
    leading ``import``/``from`` lines at module level and wraps everything from
    the first other line in a function, so a comment there would move a leading
    ``from sys import stdout`` into it and change verl's verdict. A fenced block
    already starts with the blank line after the fence, so a comment after it
    moves nothing. So a repeat keeps both scorers' verdicts on its case.
    """
    if "\n" in tag:
        raise ValueError("tag must be one line")
    out: list[str] = []
    inside = fenced = False
    for line in response.splitlines(keepends=True):
        out.append(line)
        stripped = line.strip()
        if not stripped.startswith(_FENCES):
            continue
        if inside:
            inside = False
            continue
        inside = fenced = True
        if not line.endswith("\n"):  # a fence on the last line opens nothing
            continue
        language = stripped[3:].strip().lower()
        comment = "//" if language in _SLASH_COMMENT else "#"
        out.append(f"{comment} {tag}\n")
    if not fenced:
        return f"{response}# {tag}\n" if response.endswith("\n") else f"{response}\n# {tag}"
    return "".join(out)


def repeat_cases(cases: Sequence[ParityCase], total: int, tag: str) -> list[ParitySample]:
    """``total`` samples cycling through ``cases``; every one a distinct program.

    Each sample's response carries its own comment line, so no two are identical
    and rewardbus's result cache cannot turn repeats into hits.
    """
    if not cases:
        raise ValueError("no cases to repeat")
    samples = []
    for index in range(total):
        case = cases[index % len(cases)]
        sample_id = f"{tag}-{index}"
        samples.append(ParitySample(case, sample_id, distinct_response(case.response, sample_id)))
    return samples


# A table row whose first cell is a case id in backticks: | `apps-stdin-3` | ... |
_ROW = re.compile(r"^\|\s*`([^`|]+)`\s*\|")


def documented_disagreements(markdown: str, *, heading: str = "Disagreements") -> set[str]:
    """Case ids listed in the table under the first heading that starts with ``heading``.

    The table's rows name one case each in their first cell, in backticks; the
    section ends at the next heading of the same or a higher level.
    """
    lines = markdown.splitlines()
    start = level = None
    for number, line in enumerate(lines):
        match = re.match(r"^(#+)\s+(.*)$", line)
        if match and match.group(2).strip().startswith(heading):
            start, level = number + 1, len(match.group(1))
            break
    if start is None or level is None:
        raise ValueError(f"no heading starting with {heading!r}")
    ids: set[str] = set()
    for line in lines[start:]:
        match = re.match(r"^(#+)\s", line)
        if match and len(match.group(1)) <= level:
            break
        row = _ROW.match(line)
        if row:
            ids.add(row.group(1).strip())
    return ids


def same_score(a: float, b: float) -> bool:
    """Two scores are the same score (fractions of tests, up to float noise)."""
    return abs(a - b) <= SCORE_TOLERANCE


@dataclass(frozen=True)
class Agreement:
    """How often two scorers give the right score, and each other's, over the same samples."""

    samples: int
    ours_right: int
    theirs_right: int
    same: int
    # Samples where "theirs" is right, and of those how many "ours" matches.
    same_where_theirs_right: int

    def as_json(self) -> dict[str, Any]:
        """Counts and fractions for a report."""
        n = max(self.samples, 1)
        right = max(self.theirs_right, 1)
        return {
            "samples": self.samples,
            "rewardbus_matches_expected": round(self.ours_right / n, 4),
            "verl_matches_expected": round(self.theirs_right / n, 4),
            "rewardbus_matches_verl": round(self.same / n, 4),
            "rewardbus_matches_verl_where_verl_right": round(
                self.same_where_theirs_right / right, 4
            ),
            "counts": {
                "rewardbus_right": self.ours_right,
                "verl_right": self.theirs_right,
                "same": self.same,
                "verl_right_and_same": self.same_where_theirs_right,
            },
        }


def agreement(
    expected: Iterable[float], ours: Iterable[float], theirs: Iterable[float]
) -> Agreement:
    """Compare two scorers' scores with the expected ones, sample by sample."""
    rows = list(zip(expected, ours, theirs, strict=True))
    return Agreement(
        samples=len(rows),
        ours_right=sum(same_score(o, e) for e, o, _ in rows),
        theirs_right=sum(same_score(t, e) for e, _, t in rows),
        same=sum(same_score(o, t) for _, o, t in rows),
        same_where_theirs_right=sum(same_score(t, e) and same_score(o, t) for e, o, t in rows),
    )
