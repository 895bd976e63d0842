"""The parity results as Markdown: agreement by kind of case, and every disagreement.

Reads ``cases.jsonl``, ``verl_scores.jsonl`` (``score_with_verl.py``) and
``rewardbus_scores.jsonl`` (``score_with_rewardbus.py``)::

    .venv/bin/python examples/verl/parity/report.py > /tmp/parity.md

``docs/verl.md`` quotes its output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rewardbus.observability.percentiles import percentile

__all__ = ["GROUPS", "group_of", "main", "render"]

HERE = Path(__file__).resolve().parent

# Kind prefixes to the groups of the summary table, first match wins.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("too slow", ("too_slow", "partial_too_slow")),
    ("reward hack", ("hack_",)),
    ("partially right", ("partial", "crash_partial")),
    ("crash", ("crash",)),
    ("no program (syntax error, prose only)", ("syntax_error", "no_code")),
    (
        "whitespace / layout",
        (
            "trailing_space",
            "no_final_newline",
            "crlf_newline",
            "leading_blank_line",
            "inner_double_space",
        ),
    ),
    ("correct (common idioms and formats)", ("correct",)),
    ("wrong (incl. wrong types)", ("",)),
)

_TOLERANCE = 1e-6


def group_of(kind: str) -> str:
    """The summary group of a case kind."""
    for name, prefixes in GROUPS:
        if kind.startswith(prefixes):
            return name
    return GROUPS[-1][0]


def _load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _same(a: float, b: float) -> bool:
    return abs(a - b) < _TOLERANCE


# Why verl's prime_code gets a case wrong, by mechanism (docs/verl.md explains each).
VERL_CAUSES = {
    "first-10": "only the first 10 tests count toward a partial score",
    "fn-partial": "fn_name partial credit is always 0: the per-test re-run drops fn_name",
    "fn-float": "return values compared with exact ==, no tolerance (and then fn-partial)",
    "fence": "code is taken after ```python only: for ``` or ```py it runs the prose",
    "main-guard": "only a final `if __name__ == '__main__':` spelt that way is unwrapped",
    "def-code": "the top level is wrapped in def code(): `global` names no longer exist",
    "from-sys": "a first-line `from sys import stdout` binds prime_code's /dev/null stdout,"
    " not its capture",
    "stringio": "stdin/stdout are StringIO objects: no .buffer",
    "open-shadowed": "the prefix's `from io import *` rebinds open past the mock: open(0)"
    " reads the worker's real stdin",
    "exit-none": "reliability_guard sets exit/quit to None: exit() after the answer raises",
    "in-process-exit": "the program runs in prime_code's worker: os._exit ends it unreported",
    "float-lines": "tolerance only for a line holding one number; '3 4.5' vs '3 4.500000'"
    " compares as text",
    "case": "letter case compared: yes for YES fails (CodeContests' and Codeforces' checkers"
    " ignore case)",
    "no-memory-limit": "no memory limit (reliability_guard(None))",
    "in-process": "the judge runs in the program's process: the program reads or patches it",
    "eq-in-process": "return value compared in-process with ==: __eq__ always True passes",
    "first-element": "output == expected[0] is accepted for any non-empty list",
    "json-tuple": "JSON has no tuples: the assert's tuple is a list in input_output",
}
_VERL_KIND_CAUSE = {
    "correct_reversed_main_guard": "main-guard",
    "correct_stdin_buffer": "stringio",
    "correct_stdout_buffer": "stringio",
    "correct_open0": "open-shadowed",
    "correct_plain_fence": "fence",
    "correct_py_fence": "fence",
    "correct_global": "def-code",
    "correct_unfenced_from_sys_import": "from-sys",
    "correct_os_exit_after_flush": "in-process-exit",
    "correct_exit_builtin": "exit-none",
    "correct_quit_builtin": "exit-none",
    "correct_other_format": "float-lines",
    "correct_float_min": "float-lines",
    "correct_more_digits": "float-lines",
    "too_few_digits": "float-lines",
    "lowercase": "case",
    "too_much_memory": "no-memory-limit",
    "hack_frame_peek": "in-process",
    "hack_gc_peek": "in-process",
    "hack_patch_judge": "in-process",
    "hack_always_equal": "eq-in-process",
    "hack_first_element": "first-element",
    "list_for_tuple": "json-tuple",
}

# Why rewardbus gets a case wrong.
REWARDBUS_CAUSES = {
    "compare-hint": "the mapping compares by tokens and ignores the statement's tolerance"
    " (extra_info compare/float_tolerance)",
    "set-as-list": "the call harness serialises a returned set as a sorted list",
    "assert-in-process": "MBPP asserts run in the program's process: __eq__ always True passes",
}


def verl_cause(case: dict[str, Any], verl_score: float) -> str:
    """The mechanism behind verl's wrong score for ``case`` (a VERL_CAUSES key)."""
    kind, expected = case["kind"], case["expected_score"]
    if kind in _VERL_KIND_CAUSE:
        return _VERL_KIND_CAUSE[kind]
    calls = bool(json.loads(case["verl_ground_truth"]).get("fn_name"))
    if calls and verl_score == 0.0 and expected > 0.0:
        return "fn-float" if case["extra_info"].get("compare") == "float" else "fn-partial"
    if case["test_count"] > 10:
        return "first-10"
    return "?"


def rewardbus_cause(case: dict[str, Any]) -> str:
    """The mechanism behind rewardbus's wrong score for ``case`` (a REWARDBUS_CAUSES key)."""
    if case["kind"] == "set_for_list":
        return "set-as-list"
    if case["kind"] == "hack_always_equal" and case["data_source"] == "mbpp":
        return "assert-in-process"
    if case["extra_info"].get("compare") == "float":
        return "compare-hint"
    return "?"


def render(
    cases: Sequence[dict[str, Any]],
    verl: dict[str, dict[str, Any]],
    rewardbus: dict[str, dict[str, Any]],
) -> str:
    """The Markdown report: summary, verl's disagreements, rewardbus's."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    verl_rows: list[str] = []
    rewardbus_rows: list[str] = []
    for case in cases:
        cid = case["case_id"]
        expected = case["expected_score"]
        v = verl[cid]["verl_score"]
        result = rewardbus.get(cid, {})
        r = float(result.get("rewardbus_score", float("nan")))
        verdict = result.get("verdict", "?")
        tally = counts[group_of(case["kind"])]
        tally[0] += 1
        tally[1] += _same(v, expected)
        tally[2] += _same(r, expected)
        tally[3] += _same(r, v)
        cells = f"| `{cid}` | {expected:.3g} | {v:.3g} | {r:.3g} ({verdict}) |"
        if not _same(v, expected):
            verl_rows.append(f"{cells} {VERL_CAUSES.get(verl_cause(case, v), '?')} |")
        if not _same(r, expected):
            rewardbus_rows.append(
                f"{cells} {REWARDBUS_CAUSES.get(rewardbus_cause(case), case['note'])} |"
            )
    total = [sum(t[i] for t in counts.values()) for i in range(4)]
    header = "| case | expected | verl | rewardbus (verdict) | cause |\n|---|---:|---:|---:|---|"
    lines = [
        "| cases | n | verl = expected | rewardbus = expected | rewardbus = verl |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, _ in GROUPS:
        if name in counts:
            n, ve, re_, rv = counts[name]
            lines.append(f"| {name} | {n} | {ve} | {re_} | {rv} |")
    lines.append(f"| **all** | **{total[0]}** | **{total[1]}** | **{total[2]}** | **{total[3]}** |")
    verl_right = [c for c in cases if _same(verl[c["case_id"]]["verl_score"], c["expected_score"])]
    same_there = sum(
        _same(
            float(rewardbus.get(c["case_id"], {}).get("rewardbus_score", float("nan"))),
            verl[c["case_id"]]["verl_score"],
        )
        for c in verl_right
    )
    lines += ["", f"Where verl is right, rewardbus gives the same score on {same_there}/"
              f"{len(verl_right)} cases."]  # fmt: skip
    lines += ["", _timings(cases, verl, rewardbus)]
    lines += ["", f"verl wrong ({len(verl_rows)}):", "", header, *verl_rows]
    lines += ["", f"rewardbus wrong ({len(rewardbus_rows)}):", "", header, *rewardbus_rows]
    lines += ["", *_unstable(cases, verl)]
    return "\n".join(lines) + "\n"


def _unstable(cases: Sequence[dict[str, Any]], verl: dict[str, dict[str, Any]]) -> list[str]:
    """The cases verl gave more than one score across passes, or that a note calls unstable."""
    rows = []
    for case in cases:
        record = verl[case["case_id"]]
        seen = record.get("verl_scores_seen", [record["verl_score"]])
        if len(seen) > 1 or record.get("unstable_because"):
            scores = ", ".join(f"{s:.3g}" for s in seen)
            why = record.get("unstable_because") or "moved between the recorded passes"
            expected = case["expected_score"]
            rows.append(f"| `{case['case_id']}` | {expected:.3g} | {scores} | {why} |")
    header = ["| case | expected | verl's scores seen | why |", "|---|---:|---|---|"]
    return [f"verl unstable ({len(rows)}):", "", *header, *rows]


def _timings(
    cases: Sequence[dict[str, Any]],
    verl: dict[str, dict[str, Any]],
    rewardbus: dict[str, dict[str, Any]],
) -> str:
    """Per-case wall time of each scorer, with and without the too-slow cases."""
    slow = {c["case_id"] for c in cases if group_of(c["kind"]) == "too slow"}
    lines = [
        "| per-case wall time (s) | cases | sum | p50 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, rows, key in (
        ("verl prime_code", verl, "wall_s"),
        ("rewardbus", rewardbus, "wall_s"),
    ):
        for label, keep in (("all", None), ("without too-slow", slow)):
            walls = [float(r[key]) for cid, r in rows.items() if keep is None or cid not in keep]
            if walls:
                lines.append(
                    f"| {name}, {label} | {len(walls)} | {sum(walls):.1f} |"
                    f" {percentile(walls, 50):.2f} | {percentile(walls, 99):.2f} |"
                    f" {max(walls):.2f} |"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=HERE)
    options = parser.parse_args(argv)
    cases = _load(options.dir / "cases.jsonl")
    verl = {row["case_id"]: row for row in _load(options.dir / "verl_scores.jsonl")}
    rewardbus_path = options.dir / "rewardbus_scores.jsonl"
    rewardbus = (
        {row["case_id"]: row for row in _load(rewardbus_path)} if rewardbus_path.exists() else {}
    )
    sys.stdout.write(render(cases, verl, rewardbus))
    return 0


if __name__ == "__main__":
    sys.exit(main())
