"""Score every parity case with verl's own code reward; write ``verl_scores.jsonl``.

verl 0.9.1's ``default_compute_score`` sends the data sources ``apps``, ``taco``,
``codecontests`` and ``codeforces`` to ``prime_code`` when no SandboxFusion URL is
set (``continuous=True``: the fraction of the first 10 tests passed). verl has no
assert scorer, so an ``mbpp`` case is scored as ``apps`` with its
``verl_ground_truth``, the same asserts written as ``fn_name`` calls.

``prime_code`` runs the program in a forked process of the caller (with
``reliability_guard``, not a sandbox) behind a ``multiprocessing.Manager``; each
check of a failing program costs a second round of one process per test, and a
program that never ends costs verl's 5 s whole-suite timeout plus 10 s per test
(its ``signal.alarm``). Run it with modest parallelism (threads; each call forks
its own processes)::

    .venv/bin/python examples/verl/parity/score_with_verl.py            # ~5 min on 2 cores
    .venv/bin/python examples/verl/parity/score_with_verl.py --case apps-sum-pairs/correct

Each output line: ``case_id``, ``verl_score``, ``wall_s`` (that call's wall time in
this run, with ``--jobs`` calls in flight), ``expected_score``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["VERL_DATA_SOURCES", "main", "score_case", "verl_data_source"]

HERE = Path(__file__).resolve().parent
CASES_PATH = HERE / "cases.jsonl"
SCORES_PATH = HERE / "verl_scores.jsonl"

# The data sources verl routes to its code scorer (prime_code / sandbox_fusion).
VERL_DATA_SOURCES = frozenset({"apps", "taco", "codecontests", "codeforces"})


def verl_data_source(case: dict[str, Any]) -> str:
    """The data source verl is given: MBPP goes through the ``apps`` path."""
    source = str(case["data_source"])
    return source if source in VERL_DATA_SOURCES else "apps"


def score_case(case: dict[str, Any]) -> dict[str, Any]:
    """verl's score for one case, and how long the call took."""
    from verl.utils.reward_score import default_compute_score

    # verl's scorer is untyped; it returns a float for the code data sources.
    compute: Callable[..., float] = default_compute_score
    started = time.monotonic()
    score = compute(
        verl_data_source(case), case["response"], case["verl_ground_truth"], case["extra_info"]
    )
    wall_s = time.monotonic() - started
    return {
        "case_id": case["case_id"],
        "verl_score": round(float(score), 6),
        "wall_s": round(wall_s, 3),
        "expected_score": case["expected_score"],
    }


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The cases of a cases.jsonl file, in order."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Score the cases; write the scores (all cases) or print them (``--case``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES_PATH)
    parser.add_argument("--out", type=Path, default=SCORES_PATH)
    parser.add_argument("--jobs", type=int, default=4, help="verl calls in flight")
    parser.add_argument("--case", action="append", default=[], help="only these case ids")
    options = parser.parse_args(argv)
    cases = load_cases(options.cases)
    if options.case:
        cases = [c for c in cases if c["case_id"] in set(options.case)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        rows = list(pool.map(score_case, cases))
    elapsed = time.monotonic() - started
    agree = sum(abs(r["verl_score"] - r["expected_score"]) < 1e-6 for r in rows)
    summary = (
        f"verl agrees with expected_score on {agree}/{len(rows)} cases;"
        f" {elapsed:.1f} s wall with {options.jobs} in flight"
    )
    if options.case:
        for row in rows:
            print(json.dumps(row))
        print(summary, file=sys.stderr)
        return 0
    with options.out.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    print(summary, file=sys.stderr)
    print(f"wrote {options.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
