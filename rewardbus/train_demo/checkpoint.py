"""The train demo's checkpoint: one atomic file, and the audit log of what each process applied.

``DIR/checkpoint.pt`` holds, in one write, everything a resumed run needs: the policy,
the optimiser, the LR schedule and the sampling generators (:meth:`Trainer.state_dict`),
the next step, the run id (so the topics are the same ones), the learner's position in
the scored-batch stream (:meth:`consumers.LearnerSource.position`), the step records
so far (the curve continues) and the settings that must not change across a resume.
It is written to a temporary file in the same directory, flushed to disk and renamed
over the old one, so a crash at any moment leaves either the old checkpoint or the new.

``DIR/applied.jsonl`` is appended as the run goes, one line per event (``applied``,
``skipped``, ``checkpoint``, ``resumed``), each carrying the incarnation (0 for the
first process, +1 per resume): it is how anyone can check that every step's scored
batch was applied once, and which batches of a killed process were skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rewardbus.errors import UsageError
from rewardbus.train_demo.monitor import StepRecord

__all__ = [
    "AppliedLog",
    "Checkpoint",
    "CheckpointError",
    "load_checkpoint",
    "read_applied_log",
    "save_checkpoint",
]

FORMAT = 1
CHECKPOINT_FILE = "checkpoint.pt"
APPLIED_FILE = "applied.jsonl"


class CheckpointError(UsageError):
    """A checkpoint that is missing, unreadable or made by a run of another shape."""


@dataclass(frozen=True)
class Checkpoint:
    """What ``--resume`` continues from."""

    step: int  # the next step to run
    run_id: str
    incarnation: int
    bootstrap: str | None  # None: the embedded broker, whose data is DIR/broker
    settings: Mapping[str, Any]
    trainer: Mapping[str, Any]
    position: Mapping[str, Any]
    records: tuple[StepRecord, ...]
    verdicts: Mapping[str, int]
    resumed_at: tuple[int, ...] = ()
    train_s: float = 0.0

    def check_settings(self, settings: Mapping[str, Any]) -> None:
        """``CheckpointError`` naming each setting this run changed since the checkpoint."""
        changed = [
            f"{key}={self.settings.get(key)!r} (this run: {value!r})"
            for key, value in settings.items()
            if self.settings.get(key) != value
        ]
        if changed:
            raise CheckpointError(
                "the checkpoint was made with " + ", ".join(changed) + ": resume with the same "
                "settings, or start a new run in another --checkpoint-dir"
            )


def save_checkpoint(directory: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` to ``directory/checkpoint.pt`` atomically; the path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / CHECKPOINT_FILE
    partial = directory / f".{CHECKPOINT_FILE}.{os.getpid()}.partial"
    payload = dataclasses.asdict(checkpoint) | {"format": FORMAT}
    with partial.open("wb") as out:
        torch.save(payload, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(partial, target)
    _fsync_directory(directory)
    return target


def load_checkpoint(directory: Path) -> Checkpoint | None:
    """The checkpoint in ``directory``, or None when there is none."""
    path = directory / CHECKPOINT_FILE
    if not path.exists():
        return None
    try:
        # weights_only: tensors and plain containers only, nothing that runs code on load.
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same answer
        raise CheckpointError(f"{path} is not a readable checkpoint: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a train-demo checkpoint of format {FORMAT}")
    payload.pop("format")
    payload["records"] = tuple(StepRecord(**r) for r in payload["records"])
    payload["resumed_at"] = tuple(payload["resumed_at"])
    return Checkpoint(**payload)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AppliedLog:
    """``DIR/applied.jsonl``: one JSON line per event, on disk before the next step starts."""

    def __init__(self, directory: Path, incarnation: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / APPLIED_FILE
        self._incarnation = incarnation

    def write(self, event: str, **fields: Any) -> None:
        """Append one event line and flush it to disk."""
        line = json.dumps({"event": event, "incarnation": self._incarnation, **fields})
        with self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())


def read_applied_log(path: Path) -> list[dict[str, Any]]:
    """Every event of an applied log, in order."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
