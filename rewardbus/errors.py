"""The app shell's errors: one root, three kinds, each kind one exit status of the CLI.

::

    schemas.RewardbusError
     └── ShellError                  exit 1 unless a kind says otherwise
          ├── CommandFailed          1   it ran and failed (a trace not found, a command's check)
          │    └── observability.TraceNotFound
          ├── UsageError             2   a flag or an input the command cannot work with
          │    ├── canary.GoldenSetError
          │    └── train_demo.CheckpointError
          └── Unavailable           69   this host or a program it needs cannot do it now
               ├── broker.BrokerError (PortTaken)
               ├── wiring.SandboxUnavailable
               ├── train_demo.DeviceUnavailable
               └── observability: ToolBuildError, JaegerError, PrometheusError,
                                  JaegerQueryError

The components' own roots (``KafkaIOError``, ``SandboxWorkerError`` ...) stay theirs;
``rewardbus.cli`` turns a shell error into its message and exit status, in one place,
and the Kafka seam's ``KafkaIOError`` and the publisher's ``PublishError`` (a broker
that cannot be reached or refuses) into 69, as an ``Unavailable``.
"""

from __future__ import annotations

from typing import ClassVar

from schemas import RewardbusError

__all__ = ["KINDS", "CommandFailed", "ShellError", "Unavailable", "UsageError"]


class ShellError(RewardbusError):
    """Root of the app shell's errors; ``exit_code`` is the CLI's exit status for it."""

    exit_code: ClassVar[int] = 1
    # One line for the CLI's table of exit statuses (``rewardbus --help``, README).
    meaning: ClassVar[str] = "failed"


class CommandFailed(ShellError):
    """The command ran, and what it was asked to do failed (the message says what)."""

    exit_code = 1
    meaning = "the command ran and failed: a check did not pass, or nothing was found"


class UsageError(ShellError):
    """A command was given something it cannot work with: a flag, a file, a checkpoint."""

    exit_code = 2
    meaning = "usage: a flag, a file or a checkpoint the command cannot work with"


class Unavailable(ShellError):
    """This host, or a program the command needs, cannot do it (now); the message says what."""

    exit_code = 69  # EX_UNAVAILABLE (sysexits.h)
    meaning = "unavailable: the host or a program it needs cannot (sandbox, device, Java...)"


# The kinds, in the order of their exit statuses.
KINDS: tuple[type[ShellError], ...] = (CommandFailed, UsageError, Unavailable)
