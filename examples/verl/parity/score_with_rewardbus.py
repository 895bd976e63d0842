"""Score every parity case with rewardbus's sandbox, locally (no Kafka).

Writes ``rewardbus_scores.jsonl``.

Each case goes through the same mapping the verl reward manager uses
(``consumers.verl_tasks.task_from_verl``: the verl ground truth becomes a test
suite, the response a ``Completion``), then through the real sandbox executor
(``rewardbus.wiring.build_executor``: the jail, warm pools, the harnesses) —
everything the reward manager does except the trip through Kafka::

    .venv/bin/python examples/verl/parity/score_with_rewardbus.py             # ~2 min on 2 cores
    .venv/bin/python examples/verl/parity/score_with_rewardbus.py --case apps-sum-pairs/correct

Each output line: ``case_id``, ``rewardbus_score``, ``verdict``, ``passed``,
``total``, ``message`` (the first failing test's reason), ``wall_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from consumers.verl_tasks import VerlRewardSettings, task_from_verl
from rewardbus.wiring import SandboxOptions, build_executor
from sandbox_workers import Executor

__all__ = ["main", "score_case"]

HERE = Path(__file__).resolve().parent
CASES_PATH = HERE / "cases.jsonl"
SCORES_PATH = HERE / "rewardbus_scores.jsonl"

# Only the mapping is used here; no broker is contacted.
_SETTINGS = VerlRewardSettings(bootstrap_servers="unused:9092")


async def score_case(executor: Executor, case: dict[str, Any]) -> dict[str, Any]:
    """rewardbus's judgement of one case, as the reward manager would ask for it."""
    task = task_from_verl(
        sample_id=case["case_id"],
        solution_str=case["response"],
        ground_truth=case["ground_truth"],
        extra_info=case["extra_info"],
        settings=_SETTINGS,
        data_source=case["data_source"],
    )
    started = time.monotonic()
    event = await executor.run(task.completion, task.problem.tests)
    return {
        "case_id": case["case_id"],
        "rewardbus_score": round(float(event.score), 6),
        "verdict": str(event.verdict),
        "passed": event.passed,
        "total": event.total,
        "message": event.message[:200],
        "wall_s": round(time.monotonic() - started, 3),
        "expected_score": case["expected_score"],
    }


async def score_all(cases: Sequence[dict[str, Any]], jobs: int) -> list[dict[str, Any]]:
    """Every case, ``jobs`` at a time, in the input order."""
    executor = build_executor(SandboxOptions(concurrency=jobs))
    limit = asyncio.Semaphore(jobs)

    async def one(case: dict[str, Any]) -> dict[str, Any]:
        async with limit:
            return await score_case(executor, case)

    return list(await asyncio.gather(*(one(c) for c in cases)))


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The cases of a cases.jsonl file, in order."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """Score the cases; write the scores (all cases) or print them (``--case``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES_PATH)
    parser.add_argument("--out", type=Path, default=SCORES_PATH)
    parser.add_argument("--jobs", type=int, default=2, help="executions in flight")
    parser.add_argument("--case", action="append", default=[], help="only these case ids")
    options = parser.parse_args(argv)
    cases = load_cases(options.cases)
    if options.case:
        cases = [c for c in cases if c["case_id"] in set(options.case)]
    started = time.monotonic()
    rows = asyncio.run(score_all(cases, options.jobs))
    elapsed = time.monotonic() - started
    agree = sum(abs(r["rewardbus_score"] - r["expected_score"]) < 1e-6 for r in rows)
    summary = (
        f"rewardbus agrees with expected_score on {agree}/{len(rows)} cases;"
        f" {elapsed:.1f} s wall with {options.jobs} in flight"
    )
    if options.case:
        for row in rows:
            print(json.dumps(row))
    else:
        with options.out.open("w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        print(f"wrote {options.out}", file=sys.stderr)
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
