"""What ``rewardbus train-demo`` runs, parsed once at the CLI into this value object."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rewardbus.train_demo.devices import DeviceChoice
from rewardbus.train_demo.learner import LearnerConfig
from rewardbus.train_demo.monitor import AlertRules
from rewardbus.train_demo.tasks import BEHAVIOURS, Behaviour
from schemas import KafkaSettings

__all__ = ["TrainDemoOptions"]


@dataclass(frozen=True)
class TrainDemoOptions:
    """The run: steps and batch shape, where rewards come from, how it reports."""

    steps: int = 100
    # Samples per prompt (a GRPO group); every task of the family is prompted each step.
    group_size: int = 32
    workers: int = 2
    device: DeviceChoice = "auto"
    seed: int = 0
    strict: bool = True
    json: bool = False
    plot: Path = Path("train-demo.png")
    # An existing cluster instead of the embedded broker (its topics are the run's own).
    kafka: KafkaSettings | None = None
    # Wait at most this long for a step's scored batch (the manifest's deadline too).
    step_timeout_s: float = 60.0
    # Means over this many first and last steps are the summary's first/last rewards.
    window: int = 5
    # Names of the family's tasks to train on (empty: all of them).
    tasks: tuple[str, ...] = ()
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    alerts: AlertRules = field(default_factory=AlertRules)
    d_model: int = 64
    n_layers: int = 2
    # Save a checkpoint here every checkpoint_every steps (and after the last one).
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 10
    # Continue the checkpoint in checkpoint_dir (a new run when there is none yet).
    resume: bool = False

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2 (GRPO compares within a group)")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.checkpoint_every < 1:
            raise ValueError("checkpoint_every must be at least 1")
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("--resume needs the --checkpoint-dir to resume from")
        known = {b.name for b in BEHAVIOURS}
        unknown = [name for name in self.tasks if name not in known]
        if unknown:
            raise ValueError(f"unknown tasks {unknown}; the family has {sorted(known)}")

    def behaviours(self) -> tuple[Behaviour, ...]:
        """The behaviours to train on, in the family's order."""
        return tuple(b for b in BEHAVIOURS if not self.tasks or b.name in self.tasks)
