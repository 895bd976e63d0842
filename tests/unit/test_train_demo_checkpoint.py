"""The train demo's checkpoint file: a round trip, an atomic replace, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rewardbus.train_demo.checkpoint import (
    AppliedLog,
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    read_applied_log,
    save_checkpoint,
)
from rewardbus.train_demo.monitor import StepRecord

SETTINGS = {"steps": 30, "group_size": 16, "tasks": ["add", "sub"], "learner": {"lr": 1e-3}}


def checkpoint(step: int) -> Checkpoint:
    weights = torch.arange(6, dtype=torch.float32).reshape(2, 3) * step
    return Checkpoint(
        step=step,
        run_id="abc",
        incarnation=1,
        bootstrap=None,
        settings=SETTINGS,
        trainer={"policy": {"w": weights}, "sampling": torch.ByteTensor([1, 2, 3])},
        position={"topic": "t", "offsets": {"0": step}, "taken": ["b1"]},
        records=tuple(StepRecord(step=i, reward_mean=0.1 * i, response_length=3.0,
                                 reward_latency_ms=100.0, rewards_per_s=50.0, step_s=0.2,
                                 samples=32) for i in range(step)),
        verdicts={"accepted": 3},
        resumed_at=(5,),
        train_s=12.5,
    )  # fmt: skip


def test_a_checkpoint_comes_back_as_it_was_saved(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path) is None
    save_checkpoint(tmp_path, checkpoint(3))
    save_checkpoint(tmp_path, checkpoint(4))  # replaces it
    loaded = load_checkpoint(tmp_path)
    assert loaded is not None
    assert loaded.step == 4
    assert torch.equal(loaded.trainer["policy"]["w"], checkpoint(4).trainer["policy"]["w"])
    assert loaded.records == checkpoint(4).records
    assert loaded.resumed_at == (5,)
    assert (loaded.run_id, loaded.incarnation, loaded.bootstrap) == ("abc", 1, None)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no partial left


def test_a_resume_with_other_settings_names_each_difference() -> None:
    changed = SETTINGS | {"group_size": 32, "tasks": ["add"]}
    with pytest.raises(CheckpointError, match=r"group_size=16 \(this run: 32\)") as caught:
        checkpoint(2).check_settings(changed)
    assert "tasks=['add', 'sub']" in str(caught.value)
    checkpoint(2).check_settings(SETTINGS)


def test_an_unreadable_or_foreign_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path)
    torch.save({"format": 99}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="not a train-demo checkpoint"):
        load_checkpoint(tmp_path)


def test_the_applied_log_appends_one_line_per_event(tmp_path: Path) -> None:
    AppliedLog(tmp_path, 0).write("applied", step=0, batch_id="r-step-0000")
    AppliedLog(tmp_path, 1).write("skipped", batch_id="r-step-0001")
    assert read_applied_log(tmp_path / "applied.jsonl") == [
        {"event": "applied", "incarnation": 0, "step": 0, "batch_id": "r-step-0000"},
        {"event": "skipped", "incarnation": 1, "batch_id": "r-step-0001"},
    ]
