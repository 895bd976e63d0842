"""A child process that cannot outlive this Python process, and is reaped as soon as it exits.

`ReapedChild` forks the child from a thread of its own that then waits on it, so
PR_SET_PDEATHSIG (which fires when the *thread* that forked the child ends, not the
process) means "the Python process died", whichever (possibly short-lived) thread asked
for the child; and its exit is an event to wait on, never a timer to poll.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

__all__ = ["ReapedChild", "parent_death_signal"]


def parent_death_signal(signum: signal.Signals) -> Callable[[], None] | None:
    """A preexec_fn that sends `signum` to the child when its parent thread dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signum)
        # The parent may have died between fork and prctl: then nobody would ever signal.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


class ReapedChild:
    """A child process forked by, and reaped by, a thread that lives exactly as long as it.

    Its stdout and stderr go to `log`; it runs in a process group of its own, so a
    terminal's Ctrl-C reaches only us, and we stop it. The constructor returns once the
    child is spawned and raises the OSError if it could not be.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        log: IO[bytes],
        env: Mapping[str, str] | None = None,
        death_signal: signal.Signals = signal.SIGKILL,
        name: str = "reaped-child",
    ) -> None:
        self.exited = threading.Event()
        self._spawned = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: OSError | None = None
        thread = threading.Thread(
            target=self._run, args=(argv, cwd, log, env, death_signal), name=name, daemon=True
        )
        thread.start()
        self._spawned.wait()
        if self._error is not None:
            raise self._error

    def _run(
        self,
        argv: list[str],
        cwd: Path,
        log: IO[bytes],
        env: Mapping[str, str] | None,
        death_signal: signal.Signals,
    ) -> None:
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - a fixed argv, no shell
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                process_group=0,
                preexec_fn=parent_death_signal(death_signal),  # noqa: PLW1509 - prctl must run in the child
            )
        except OSError as exc:
            self._error = exc
            return
        finally:
            self._spawned.set()
        self._proc.wait()
        self.exited.set()

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal), else None."""
        return self._proc.returncode if self._proc is not None else None

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Block until the child exits; its exit status, or None on timeout."""
        return self.returncode if self.exited.wait(timeout_s) else None

    def send(self, signum: signal.Signals) -> None:
        """Signal the child unless it has exited."""
        # Popen.send_signal skips a reaped child, so a recycled pid is never hit.
        if self._proc is not None and not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signum)

    def terminate(self, timeout_s: float) -> None:
        """SIGTERM, wait up to timeout_s, then SIGKILL; return once the child is reaped."""
        self.send(signal.SIGTERM)
        if not self.exited.wait(timeout_s):
            self.kill()

    def kill(self) -> None:
        """SIGKILL the child and return once it is reaped."""
        self.send(signal.SIGKILL)
        self.exited.wait()
