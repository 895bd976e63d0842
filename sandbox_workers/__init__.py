"""The sandbox side of rewardbus: isolation, languages, judging, the worker service.

Public surface: :class:`Executor` (judge one completion), its config and
errors, :func:`extract_code`, and the sandbox seam (:class:`Sandbox`,
:class:`ExecRequest`, :class:`ExecResult`, :class:`BindMount`,
:class:`SandboxFault`) with its implementation :class:`JailSandbox`
(:class:`JailConfig`, :func:`detect_layers` for ``rewardbus doctor``).

Errors: one root, :class:`SandboxWorkerError` (``reason``, ``retriable``); the
worker service catches it alone (what it does with each branch:
:mod:`sandbox_workers.errors`)::

    SandboxWorkerError
    ├── SandboxFault            retriable: retried, then verdict sandbox_error
    │   ├── ZygoteFault
    │   ├── IsolationUnavailable  (not retriable: the worker refuses to start)
    │   └── BuildError          (not retriable)
    ├── ExecutorError
    │   └── InvalidCompletion   → the DLQ
    ├── ProblemError
    │   ├── ProblemNotFound     → the DLQ
    │   ├── DigestMismatch      → the DLQ
    │   └── ProblemTableBehind  retriable: tried again, then redelivered
    └── RewardUndeliverable     → the DLQ
"""

from __future__ import annotations

from sandbox_workers.errors import SandboxWorkerError
from sandbox_workers.executor import Executor, ExecutorConfig, ExecutorError, InvalidCompletion
from sandbox_workers.extract import extract_code
from sandbox_workers.jail import JailConfig, JailSandbox, detect_layers
from sandbox_workers.sandbox import BindMount, ExecRequest, ExecResult, Sandbox, SandboxFault

__all__ = [
    "BindMount",
    "ExecRequest",
    "ExecResult",
    "Executor",
    "ExecutorConfig",
    "ExecutorError",
    "InvalidCompletion",
    "JailConfig",
    "JailSandbox",
    "Sandbox",
    "SandboxFault",
    "SandboxWorkerError",
    "detect_layers",
    "extract_code",
]
