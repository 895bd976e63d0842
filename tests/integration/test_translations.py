"""The translated set through the whole pipeline: every correct translation accepted, every
broken one rejected, in every language that has functions.

``tests/data/multipl/`` holds ten problems written here (never published: no model was
trained on them) in each language's MultiPL-E shape, a correct and a broken solution each
(PROBLEMS.md). Producer → broker → two strict-jail workers → aggregator → learner, one batch.
"""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from consumers import ScoredBatches
from producers import RolloutProducer
from rewardbus.topics import await_group_members, ensure_topics
from sandbox_workers.languages import LANGUAGES
from schemas import AssertSuite, BatchManifest, Completion, KafkaSettings, Limits, Verdict
from tests.support.stages import aggregator, group_of, running, worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

SET = Path(__file__).parents[1] / "data" / "multipl"
PROBLEMS = (
    "add", "is_palindrome", "fib", "max_element", "count_vowels",
    "reverse_words", "sum_even", "factorial", "gcd", "fizzbuzz",
)  # fmt: skip
# Languages without functions to call: SQL's programs are queries over a schema.
NO_FUNCTIONS = frozenset({"sql"})
# The JVM compilers (kotlinc, scalac) and GHC take seconds per program on a busy 2-core host.
LIMITS = Limits(time_s=5.0, total_time_s=60.0, memory_mb=512, compile_time_s=120.0)


def _translations() -> dict[str, dict[str, Any]]:
    files = {}
    for path in sorted(SET.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        assert data["language"] == path.stem, path
        files[path.stem] = data
    return files


def _completions(files: dict[str, dict[str, Any]]) -> list[Completion]:
    completions = []
    for language, data in files.items():
        for problem in data["problem"]:
            suite = AssertSuite(code=problem["tests"], entry_point=problem.get("entry_point"))
            for kind in ("correct", "broken"):
                completions.append(
                    Completion(
                        sample_id=f"{language}/{problem['name']}/{kind}",
                        batch_id="translations",
                        group_id=f"{language}/{problem['name']}",
                        language=language,
                        code=problem[kind],
                        tests=suite,
                        limits=LIMITS,
                    )
                )
    return completions


def test_every_language_with_functions_has_the_whole_set() -> None:
    files = _translations()
    assert set(files) == set(LANGUAGES) - NO_FUNCTIONS
    for language, data in files.items():
        # In the language's own spelling where MultiPL-E renames (countVowels in Haskell).
        names = [problem["name"].replace("_", "").lower() for problem in data["problem"]]
        assert sorted(names) == sorted(p.replace("_", "") for p in PROBLEMS), language
        for problem in data["problem"]:
            assert problem["correct"].strip() != problem["broken"].strip(), (language, problem)


async def test_every_correct_translation_is_accepted_and_every_broken_one_rejected(
    kafka: KafkaSettings,
) -> None:
    completions = _completions(_translations())
    manifest = BatchManifest(
        batch_id="translations",
        sample_ids=[c.sample_id for c in completions],
        group_ids=[c.group_id for c in completions],
        group_size=2,
        deadline=time.time() + 1500,
    )
    await ensure_topics(kafka, partitions=2)
    async with (
        running(aggregator(kafka)),
        running(worker(kafka, "translations-1")),
        running(worker(kafka, "translations-2")),
        ScoredBatches(kafka, group_id=group_of(kafka, "learner")) as learner,
    ):
        # Two workers, one per core: the compiles (kotlinc, scalac, GHC) are most of the work.
        await await_group_members(kafka, group_of(kafka, "workers"), 2, timeout_s=60)
        async with RolloutProducer(kafka) as producer:
            await producer.publish_manifest(manifest)
            await producer.publish_many(completions)
        batch = await learner.get("translations", timeout=1500)
    assert batch.complete and batch.missing == []
    wrong = []
    for sample in batch.samples:
        kind = sample.sample_id.rsplit("/", 1)[1]
        accepted = sample.verdict is Verdict.ACCEPTED and sample.score == 1.0
        if accepted != (kind == "correct"):
            wrong.append(f"{sample.sample_id}: {sample.verdict} {sample.score}")
    assert not wrong, "\n".join(wrong)
