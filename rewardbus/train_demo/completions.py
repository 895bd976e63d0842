"""A step's samples as wire messages: one ``Completion`` per sample, one manifest per step.

The program judged is the prompt's header completed by the response (a
completion-style task, like HumanEval's); the tests are the task's cases as an
``AssertSuite``, one test per case, so the worker scores the fraction passed.
Identical programs under identical tests have the same content fingerprint, so
the workers' result cache judges each once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rewardbus.train_demo.tasks import Task
from schemas import AssertSuite, BatchManifest, Completion, Limits

__all__ = ["DATA_SOURCE", "StepSamples", "step_samples", "suite_for"]

DATA_SOURCE = "rewardbus/train-demo"

# An expression either returns at once or fails: a second per test is generous, and
# a small memory cap keeps a worst case cheap.
_LIMITS = Limits(time_s=1.0, total_time_s=5.0, memory_mb=128)


def suite_for(task: Task) -> AssertSuite:
    """The task's cases, one assert statement per test."""
    return AssertSuite(cases=task.assert_cases())


@dataclass(frozen=True)
class StepSamples:
    """A step's manifest and completions, in sample order."""

    manifest: BatchManifest
    completions: tuple[Completion, ...]

    @property
    def sample_ids(self) -> list[str]:
        """The sample ids in rollout order."""
        return list(self.manifest.sample_ids)

    @property
    def group_ids(self) -> list[str]:
        """Each sample's GRPO group (verl's ``uid``): one per prompt of the step."""
        return list(self.manifest.group_ids)


def step_samples(
    batch_id: str,
    tasks: Sequence[Task],
    responses: Sequence[str],
    *,
    policy_version: int,
    deadline_s: float,
    now: float | None = None,
) -> StepSamples:
    """Messages for one step: sample ``i`` is ``tasks[i]`` answered by ``responses[i]``.

    Samples of the same task in a step form one GRPO group.
    """
    if len(tasks) != len(responses):
        raise ValueError(f"{len(tasks)} tasks but {len(responses)} responses")
    created = time.time() if now is None else now
    sample_ids = [f"{batch_id}/{i}" for i in range(len(tasks))]
    group_ids = [f"{batch_id}/{task.name}" for task in tasks]
    suites = {task.name: suite_for(task) for task in tasks}
    completions = tuple(
        Completion(
            sample_id=sample_id,
            batch_id=batch_id,
            group_id=group_id,
            policy_version=policy_version,
            language="python",
            code=task.program(response),
            tests=suites[task.name],
            limits=_LIMITS,
            created_at=created,
            attributes={"data_source": DATA_SOURCE, "task": task.name},
        )
        for sample_id, group_id, task, response in zip(
            sample_ids, group_ids, tasks, responses, strict=True
        )
    )
    manifest = BatchManifest(
        batch_id=batch_id,
        sample_ids=sample_ids,
        group_ids=group_ids,
        group_size=max(1, len(tasks) // max(1, len(suites))),
        policy_version=policy_version,
        deadline=created + deadline_s,
        created_at=created,
    )
    return StepSamples(manifest=manifest, completions=completions)
