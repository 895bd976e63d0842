"""Structs the sandbox workers persist outside the rollout flow: the result cache.

A :class:`CachedResult` is the judged part of a :class:`~schemas.messages.RewardEvent`,
keyed by the content fingerprint of what was judged (language, normalised code,
test-suite digest, limits, runtime version). It carries nothing about the sample
that produced it, so it can be turned into the reward of any later sample with
the same fingerprint.
"""

from __future__ import annotations

import msgspec

from schemas.messages import SCHEMA_VERSION, TestOutcome, Verdict, _now

__all__ = ["CachedResult"]


class CachedResult(msgspec.Struct, frozen=True, kw_only=True):
    """One judged result on the compacted result-cache topic; key is ``fingerprint``."""

    fingerprint: str
    score: float
    verdict: Verdict
    passed: int = 0
    total: int = 0
    tests: list[TestOutcome] = []
    # As on RewardEvent: ``tests`` is a summary, ``test_verdicts`` counts every test.
    tests_summarised: bool = False
    test_verdicts: dict[Verdict, int] = {}
    stdout_tail: str = ""
    stderr_tail: str = ""
    message: str = ""
    program_index: int = 0
    # What the original execution cost: lets a hit be reported as time saved.
    exec_ms: float = 0.0
    worker_id: str = ""
    created_at: float = msgspec.field(default_factory=_now)
    schema_version: int = SCHEMA_VERSION
