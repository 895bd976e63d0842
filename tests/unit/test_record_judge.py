"""The record judge's dead-letter error types: a closed set that covers the error tree.

The judge's path through a record (decode, admit, judge, emit, dead-letter) is tested
through the worker on the in-memory broker, in test_worker_loop.py.
"""

from __future__ import annotations

from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.executor import InvalidCompletion
from sandbox_workers.jail.build import BuildError
from sandbox_workers.jail.config import IsolationUnavailable
from sandbox_workers.pool.zygote import ZygoteFault
from sandbox_workers.problems import DigestMismatch, ProblemTableBehind
from sandbox_workers.record_judge import RewardUndeliverable, error_type_of
from schemas import DEAD_LETTER_ERROR_TYPES


def _tree(root: type[SandboxWorkerError]) -> list[type[SandboxWorkerError]]:
    below = root.__subclasses__()
    return [root, *(cls for sub in below for cls in _tree(sub))]


def test_every_sandbox_worker_error_is_a_listed_dead_letter_error_type() -> None:
    tree = _tree(SandboxWorkerError)
    # The leaves of each module that defines some: the whole tree is imported.
    leaves = [BuildError, IsolationUnavailable, ZygoteFault, DigestMismatch, ProblemTableBehind]
    assert set(leaves) <= set(tree)
    names = {cls.__name__ for cls in tree}
    assert names <= set(DEAD_LETTER_ERROR_TYPES), names - set(DEAD_LETTER_ERROR_TYPES)


def test_an_error_is_named_by_its_class_or_its_nearest_listed_base() -> None:
    class NotListed(InvalidCompletion):
        pass

    assert error_type_of(RewardUndeliverable("gone")) == "RewardUndeliverable"
    assert error_type_of(InvalidCompletion("no tests")) == "InvalidCompletion"
    assert error_type_of(NotListed("new")) == "InvalidCompletion"
