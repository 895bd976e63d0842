"""ReapedChild: the one spawn/reap/stop of the broker JVM, Jaeger and Prometheus children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest

from rewardbus.runtime.reaped_child import ReapedChild
from tests.processes import exited_within

REPO = Path(__file__).resolve().parents[2]
# Says "ready" once SIGTERM is ignored, then waits for a signal that never comes.
_STUBBORN = (
    "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); signal.pause()"
)


def _pipe() -> tuple[IO[bytes], IO[bytes]]:
    read_fd, write_fd = os.pipe()
    return os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")


def test_wait_returns_the_exit_status_and_none_on_timeout(tmp_path: Path) -> None:
    with (tmp_path / "log").open("wb") as log:
        done = ReapedChild([sys.executable, "-c", "raise SystemExit(3)"], cwd=tmp_path, log=log)
        pausing = ReapedChild([sys.executable, "-c", "import signal; signal.pause()"],
                              cwd=tmp_path, log=log)  # fmt: skip
    assert done.wait(30) == 3
    assert pausing.wait(0) is None
    pausing.kill()
    assert pausing.returncode == -signal.SIGKILL
    assert pausing.exited.is_set()


def test_terminate_escalates_to_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    reader, writer = _pipe()
    with reader, writer:
        child = ReapedChild([sys.executable, "-c", _STUBBORN], cwd=tmp_path, log=writer)
        assert reader.readline() == b"ready\n"
        child.terminate(0.2)
    assert child.returncode == -signal.SIGKILL
    child.terminate(0.2)  # an exited child is never signalled again
    assert child.returncode == -signal.SIGKILL


def test_a_child_that_cannot_start_raises_its_os_error(tmp_path: Path) -> None:
    with (tmp_path / "log").open("wb") as log, pytest.raises(FileNotFoundError):
        ReapedChild([str(tmp_path / "no-such-binary")], cwd=tmp_path, log=log)


def test_the_child_dies_with_its_parent_even_when_a_short_lived_thread_spawned_it(
    tmp_path: Path,
) -> None:
    # The spawning thread ends at once; the death signal must still wait for the process.
    parent_script = (
        "import signal, sys, threading\n"
        "from pathlib import Path\n"
        "from rewardbus.runtime.reaped_child import ReapedChild\n"
        "children = []\n"
        "def spawn():\n"
        "    with open(sys.argv[1], 'wb') as log:\n"
        "        children.append(ReapedChild(['sleep', '600'], cwd=Path('.'), log=log,\n"
        "                                    death_signal=signal.SIGTERM))\n"
        "thread = threading.Thread(target=spawn)\n"
        "thread.start()\n"
        "thread.join()\n"
        "print(children[0].pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_script, str(tmp_path / "log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert parent.stdout is not None and parent.stdin is not None
    child_pid = 0
    try:
        child_pid = int(parent.stdout.readline())
        assert not exited_within(child_pid, 0)  # alive after its spawning thread ended
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
        parent.stdin.close()
    try:
        assert exited_within(child_pid, 30)
    finally:
        if child_pid and not exited_within(child_pid, 0):
            os.kill(child_pid, signal.SIGKILL)  # never leak the child, even from a failing test


def test_a_sibling_thread_may_wait_while_the_reaper_reaps(tmp_path: Path) -> None:
    reader, writer = _pipe()
    with reader, writer:
        child = ReapedChild([sys.executable, "-c", _STUBBORN], cwd=tmp_path, log=writer)
        assert reader.readline() == b"ready\n"
    statuses: list[int | None] = []
    waiter = threading.Thread(target=lambda: statuses.append(child.wait(30)))
    waiter.start()
    child.kill()
    waiter.join()
    assert statuses == [-signal.SIGKILL]
