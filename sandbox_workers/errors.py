"""The root of every sandbox-worker error: ``reason`` says why, ``retriable`` whether trying
again can help. The whole tree, and what the worker does with each branch::

    SandboxWorkerError
    ├── SandboxFault            the sandbox failed, not the program (retriable): the executor
    │   │                       retries it, then reports verdict sandbox_error
    │   ├── ZygoteFault         a warm interpreter failed: discarded, the run goes cold
    │   ├── IsolationUnavailable  a layer strict mode requires is missing (not retriable:
    │   │                       the worker refuses to start)
    │   └── BuildError          the launcher cannot be compiled (not retriable)
    ├── ExecutorError
    │   └── InvalidCompletion   no tests, unknown language, malformed suite → the DLQ
    ├── ProblemError
    │   ├── ProblemNotFound     no inline tests and no such problem → the DLQ
    │   ├── DigestMismatch      written against another version of the suite → the DLQ
    │   └── ProblemTableBehind  the problems table did not catch up in time (retriable)
    └── RewardUndeliverable     the reward's destination refused it, or its retries ran out
                                → the DLQ

The worker catches this root alone. A retriable error is tried again (bounded);
if it persists the record is left uncommitted and the worker stops with the
error, so the group redelivers the record (to a healthier member, or to this one
restarted); it is never dead-lettered. A non-retriable one dead-letters its
input with ``reason``. Anything else is a bug in our code: it is logged with its
traceback and stops the worker, non-zero, its records redelivered.
"""

from __future__ import annotations

from schemas import RewardbusError

__all__ = ["SandboxWorkerError"]


class SandboxWorkerError(RewardbusError):
    """Root of the sandbox side's errors: a :class:`~schemas.RewardbusError`."""
