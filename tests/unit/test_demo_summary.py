"""The demo's summary: a typed record whose ``--json`` object keeps its keys."""

from __future__ import annotations

import dataclasses
import json

from rewardbus.demo import DemoSummary
from rewardbus.observability.percentiles import Percentiles

# The keys scripts read from `rewardbus demo --json` (its last stdout line).
JSON_KEYS = {
    "batches", "batches_complete", "broken_accepted", "broken_total", "cache_hits",
    "canonical_accepted", "canonical_total", "completions", "completions_per_s", "elapsed_s",
    "ok", "produce_to_reward_ms", "produce_to_scored_batch_ms", "rewards",
    "sandbox_degraded_layers", "verdicts", "workers",
}  # fmt: skip

GOOD = DemoSummary(
    completions=4,
    rewards=4,
    workers=2,
    batches=1,
    batches_complete=1,
    elapsed_s=1.5,
    completions_per_s=2.7,
    produce_to_reward_ms=Percentiles(10.0, 20.0, 21.0),
    produce_to_scored_batch_ms=Percentiles(30.0, 31.0, 31.0),
    verdicts={"accepted": 2, "wrong_answer": 2},
    canonical_accepted=2,
    canonical_total=2,
    broken_accepted=0,
    broken_total=2,
    cache_hits=0,
    sandbox_degraded_layers=[],
)


def test_json_keeps_the_keys_and_says_ok() -> None:
    document = json.loads(json.dumps(GOOD.to_json()))
    assert set(document) == JSON_KEYS
    assert document["ok"] is True
    assert document["produce_to_reward_ms"] == {"p50": 10.0, "p99": 20.0, "max": 21.0}
    assert document["verdicts"] == {"accepted": 2, "wrong_answer": 2}


def test_not_ok_when_a_broken_one_passes_a_canonical_fails_or_a_reward_is_missing() -> None:
    assert not dataclasses.replace(GOOD, broken_accepted=1).ok
    assert not dataclasses.replace(GOOD, canonical_accepted=1).ok
    assert not dataclasses.replace(GOOD, rewards=3).ok
