"""Write the parity problems as a verl RL dataset (parquet), for a GRPO run on rewardbus.

One row per problem (an RL dataset holds prompts; the policy writes the
responses), in the columns verl's ``RLHFDataset`` and reward loop read:

- ``data_source``: ``apps`` / ``taco`` / ``codecontests`` / ``codeforces`` / ``mbpp``
  (verl's built-in scorer has no ``mbpp``; rewardbus's reward manager does);
- ``prompt``: ``[{"role": "user", "content": ...}]``: the statement, a sample (stdin
  problems) or the asserts (MBPP, as MBPP prompts show them), and the answer format;
- ``ability``: ``"code"``;
- ``reward_model``: ``{"style": "rule", "ground_truth": <JSON string>}``: verl's
  ``input_output`` JSON for io problems, ``{"test_list": [...]}`` for MBPP (a
  string in both cases, so the column has one type);
- ``extra_info``: ``{"split", "index", "language", "problem_id"}``.

The files are generated, not committed::

    # writes examples/verl/data/train.parquet and test.parquet
    .venv/bin/python examples/verl/parity/to_parquet.py

With 28 problems the validation set is the training set (``split`` says which
file a row came from); the point is the plumbing, not a held-out score.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main", "problem_rows", "prompt_text"]

HERE = Path(__file__).resolve().parent
CASES_PATH = HERE / "cases.jsonl"
DATA_DIR = HERE.parent / "data"

_STDIN_FORMAT = (
    "Write a complete Python 3 program that reads the input from standard input and writes "
    "the answer to standard output. Answer with one ```python code block."
)
_CALL_FORMAT = (
    "Write the function in Python 3 (it is called directly: do not read input or print the "
    "result). Answer with one ```python code block."
)


def prompt_text(case: dict[str, Any]) -> str:
    """The user message for the problem of ``case``."""
    statement = case["statement"]
    truth = case["ground_truth"]
    if isinstance(truth, dict) and "test_list" in truth:
        tests = "\n".join(truth["test_list"][:3])
        return f"{statement}\n\nYour code should pass these tests:\n\n{tests}\n\n{_CALL_FORMAT}"
    io = json.loads(truth)
    if io.get("fn_name"):
        return f"{statement}\n\n{_CALL_FORMAT}"
    sample_in, sample_out = io["inputs"][0], io["outputs"][0]
    return (
        f"{statement}\n\nSample input:\n{sample_in.rstrip()}\n\n"
        f"Sample output:\n{sample_out.rstrip()}\n\n{_STDIN_FORMAT}"
    )


def problem_rows(cases: Sequence[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """One dataset row per problem, in the order problems first appear."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for case in cases:
        problem_id = case["problem_id"]
        if problem_id in seen:
            continue
        seen.add(problem_id)
        truth = case["ground_truth"]
        rows.append(
            {
                "data_source": case["data_source"],
                "prompt": [{"role": "user", "content": prompt_text(case)}],
                "ability": "code",
                "reward_model": {
                    "style": "rule",
                    "ground_truth": truth if isinstance(truth, str) else json.dumps(truth),
                },
                "extra_info": {
                    "split": split,
                    "index": len(rows),
                    "language": case["extra_info"].get("language", "python"),
                    "problem_id": problem_id,
                },
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Write train.parquet and test.parquet."""
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES_PATH)
    parser.add_argument("--out-dir", type=Path, default=DATA_DIR)
    options = parser.parse_args(argv)
    with options.cases.open(encoding="utf-8") as handle:
        cases = [json.loads(line) for line in handle if line.strip()]
    options.out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = problem_rows(cases, split)
        path = options.out_dir / f"{split}.parquet"
        pd.DataFrame(rows).to_parquet(path, index=False)
        print(f"wrote {path}: {len(rows)} problems", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
