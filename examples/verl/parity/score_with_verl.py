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
    .venv/bin/python examples/verl/parity/score_with_verl.py --repeat 3 --loaded 3  # ~40 min

Some of verl's scores are not stable: a program that reads the judge's objects
through the garbage collector finds them or not depending on when the collector
last ran, and a slow case lands either side of a timeout depending on the load.
``--repeat N`` scores every case N times on a quiet machine and ``--loaded N`` N
times more with one busy process per core beside it; a case that was given more
than one score is recorded as unstable, and the parity test never asks verl for
its score again (``docs/verl.md`` lists them). So is a case whose line carries
``unstable_because``: a reason, written by hand, for one that moved where a rerun
here did not show it (in CI, in a process holding other things); a rewrite keeps it.

Each output line: ``case_id``, ``verl_score`` (the score verl gave most often),
``verl_scores_seen`` (every distinct score it gave, ascending), ``wall_s`` (the
slowest call's wall time, with ``--jobs`` calls in flight), ``expected_score``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "VERL_DATA_SOURCES",
    "cpu_load",
    "main",
    "merge_passes",
    "score_case",
    "verl_data_source",
]

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


def merge_passes(passes: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per case from several passes: the most frequent score and every score seen.

    Ties go to the score of the earliest pass; ``wall_s`` is the slowest call's.
    """
    merged = []
    for rows in zip(*passes, strict=True):
        scores = [row["verl_score"] for row in rows]
        counts = Counter(scores)
        top = max(counts.values())
        merged.append(
            {
                "case_id": rows[0]["case_id"],
                "verl_score": next(s for s in scores if counts[s] == top),
                "verl_scores_seen": sorted(counts),
                "wall_s": max(row["wall_s"] for row in rows),
                "expected_score": rows[0]["expected_score"],
            }
        )
    return merged


def _burn() -> None:
    while True:
        pass


@contextmanager
def cpu_load(processes: int) -> Iterator[None]:
    """``processes`` busy loops beside the block (0: none), stopped after it."""
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(processes)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.join()


def _unstable_notes(path: Path) -> dict[str, str]:
    """``unstable_because`` of each case that has one in an earlier recording at ``path``."""
    if not path.exists():
        return {}
    return {
        row["case_id"]: row["unstable_because"]
        for row in load_cases(path)
        if row.get("unstable_because")
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
    parser.add_argument("--repeat", type=int, default=1, help="passes on a quiet machine")
    parser.add_argument(
        "--loaded", type=int, default=0, help="passes more with one busy process per core"
    )
    options = parser.parse_args(argv)
    cases = load_cases(options.cases)
    if options.case:
        cases = [c for c in cases if c["case_id"] in set(options.case)]
    started = time.monotonic()
    burners = [0] * options.repeat + [os.cpu_count() or 1] * options.loaded
    passes = []
    for number, load in enumerate(burners, 1):
        with cpu_load(load), ThreadPoolExecutor(max_workers=options.jobs) as pool:
            passes.append(list(pool.map(score_case, cases)))
        print(f"pass {number}/{len(burners)} done ({load} busy)", file=sys.stderr)
    rows = merge_passes(passes)
    elapsed = time.monotonic() - started
    agree = sum(abs(r["verl_score"] - r["expected_score"]) < 1e-6 for r in rows)
    unstable = [r["case_id"] for r in rows if len(r["verl_scores_seen"]) > 1]
    summary = (
        f"verl agrees with expected_score on {agree}/{len(rows)} cases;"
        f" {len(unstable)} unstable over {len(passes)} passes {unstable};"
        f" {elapsed:.1f} s wall with {options.jobs} in flight"
    )
    if options.case:
        for row in rows:
            print(json.dumps(row))
        print(summary, file=sys.stderr)
        return 0
    notes = _unstable_notes(options.out)
    for row in rows:  # a note says why: what a rerun here may not show (a CI run did)
        if row["case_id"] in notes:
            row["unstable_because"] = notes[row["case_id"]]
    with options.out.open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    print(summary, file=sys.stderr)
    print(f"wrote {options.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
