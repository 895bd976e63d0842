"""One completion's reward: its tests resolved, then the result cache answers or the sandbox runs.

Two ways, one interface (:class:`Judging`): :class:`Uncached` (the result cache
is off) and :class:`Cached`. Both run the sandbox through :class:`Executions`,
which holds at most ``concurrency`` executions at a time; a cache hit takes no slot.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from sandbox_workers.extract import program_of
from sandbox_workers.fingerprint import fingerprint
from sandbox_workers.languages import lookup
from sandbox_workers.metrics import WorkerMetrics
from sandbox_workers.problems import ProblemStore
from sandbox_workers.result_cache import ClusterResultCache
from schemas import Completion, RewardEvent, TestSuite, bounded_reward, is_canary_batch

__all__ = ["Cached", "CompletionRunner", "Executions", "Judging", "Uncached"]


class CompletionRunner(Protocol):
    """What the worker needs of the executor."""

    @property
    def languages(self) -> dict[str, str]:
        """Language name -> toolchain version (part of every cache fingerprint)."""
        ...

    async def run(
        self,
        completion: Completion,
        suite: TestSuite | None = None,
        *,
        output_tail_bytes: int | None = None,
    ) -> RewardEvent:
        """Judge ``completion``; the event keeps the last ``output_tail_bytes`` of its
        output (None: the runner's default)."""
        ...


class Executions:
    """The sandbox, at most ``concurrency`` executions at a time."""

    def __init__(self, runner: CompletionRunner, concurrency: int, metrics: WorkerMetrics) -> None:
        self._runner = runner
        self._slots = asyncio.Semaphore(concurrency)
        self._metrics = metrics

    @property
    def languages(self) -> dict[str, str]:
        """The runner's toolchain versions."""
        return self._runner.languages

    async def run(self, completion: Completion, suite: TestSuite) -> RewardEvent:
        async with self._slots:
            self._metrics.executing += 1
            try:
                event = await self._runner.run(completion, suite)
            finally:
                self._metrics.executing -= 1
        # Before it is cached or sent: however many tests the suite has, the reward (and
        # its cache entry) must fit their topics' record limit (schemas.outcomes).
        return bounded_reward(event)


class Judging(Protocol):
    """resolve tests → cache lookup or bounded execution."""

    async def judge(self, completion: Completion) -> tuple[RewardEvent, bool]:
        """The reward of ``completion``, and whether the result cache answered."""
        ...


class Uncached:
    """Every completion is run (the result cache is off)."""

    def __init__(self, problems: ProblemStore, executions: Executions) -> None:
        self._problems = problems
        self._executions = executions

    async def judge(self, completion: Completion) -> tuple[RewardEvent, bool]:
        suite = await self._problems.resolve(completion)
        return await self._executions.run(completion, suite), False


class Cached:
    """A completion whose judgement the group has made before is answered from the cache."""

    def __init__(
        self,
        problems: ProblemStore,
        executions: Executions,
        cache: ClusterResultCache,
        *,
        runtime_version: str,
    ) -> None:
        self._problems = problems
        self._executions = executions
        self._cache = cache
        self._uncached = Uncached(problems, executions)
        self._runtime_version = runtime_version

    async def judge(self, completion: Completion) -> tuple[RewardEvent, bool]:
        # A judge canary must run every time (a cached verdict would hide the drift it
        # watches for), and its result is not shared.
        if is_canary_batch(completion.batch_id):
            return await self._uncached.judge(completion)
        suite, digest = await self._problems.resolve_with_digest(completion)
        key = self._fingerprint(completion, digest)
        if key is None:
            return await self._executions.run(completion, suite), False
        return await self._cache.get_or_compute(
            key, completion, lambda: self._executions.run(completion, suite)
        )

    def _fingerprint(self, completion: Completion, suite_digest: str) -> str | None:
        """The content key of this judgement, or None when it cannot be cached."""
        language = lookup(completion.language)
        if language is None:
            return None  # the executor reports the unknown language
        version = self._executions.languages.get(language.name)
        if version is None:
            return None
        code = program_of(completion, language.name)
        if code is None:
            return None
        runtime = f"{version}|{self._runtime_version}"
        return fingerprint(language.name, code, suite_digest, completion.limits, runtime)
