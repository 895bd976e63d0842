"""``rewardbus train-demo`` survives its own crash: kill -9 mid-run, ``--resume``, and every
step's scored batch is applied once, the curve going on where the checkpoint left it.

Run as a user would: two processes of the CLI on the embedded broker, whose data the
checkpoint directory keeps, so the scored-batch stream outlives the killed process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rewardbus.train_demo.checkpoint import load_checkpoint, read_applied_log
from tests.support.poll import until

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

STEPS, EVERY, KILL_AFTER = 30, 5, 17  # checkpoints at 5, 10, 15: the resume starts at 15
RESUME_AT = KILL_AFTER // EVERY * EVERY
PROGRESS = re.compile(r"step (\d+)/\d+\s+reward ([0-9.]+)")


def _argv(checkpoints: Path, plot: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rewardbus",
        "train-demo",
        "--steps",
        str(STEPS),
        "--group-size",
        "16",
        "--tasks",
        "add,sub,mul,square",
        "--workers",
        "2",
        "--device",
        "cpu",
        "--seed",
        "0",
        "--checkpoint-dir",
        str(checkpoints),
        "--checkpoint-every",
        str(EVERY),
        "--plot",
        str(plot),
        "--json",
        *extra,
    ]


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except FileNotFoundError:
            continue
        for child in map(int, children):
            found |= {child, *_descendants(child)}
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


async def _run_until_step(argv: list[str], step: int) -> tuple[dict[int, float], dict[int, bytes]]:
    """Start the first process, kill -9 it once it reported ``step``: its rewards by step,
    and the command line of each process under it at that moment."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    rewards: dict[int, float] = {}
    lines: list[str] = []
    async with asyncio.timeout(240):
        while step not in rewards:
            line = (await proc.stderr.readline()).decode()
            assert line, f"the first run ended before step {step}:\n" + "".join(lines[-40:])
            lines.append(line)
            if (found := PROGRESS.search(line)) is not None:
                rewards[int(found[1]) - 1] = float(found[2])
    children = {pid: _cmdline(pid) for pid in _descendants(proc.pid)}
    proc.kill()
    await proc.wait()
    return rewards, children


async def _gone(pids: set[int], timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for every one of ``pids`` to exit; fail naming those left."""
    left = set(pids)

    def exited() -> bool:
        nonlocal left  # a pid once seen gone is not looked at again: it may be reused
        left = {pid for pid in left if _alive(pid)}
        return not left

    await until(exited, lambda: f"pids to exit, {sorted(left)} still alive", timeout_s=timeout_s)


@pytest.mark.timeout(600)
async def test_a_killed_run_resumes_and_applies_every_batch_once(tmp_path: Path) -> None:
    checkpoints, plot = tmp_path / "checkpoints", tmp_path / "curves.png"
    before, children = await _run_until_step(_argv(checkpoints, plot), KILL_AFTER)
    # The broker is killed with it (parent-death signal), leaving its data in the
    # checkpoint directory for the next one; the sandbox workers are told to stop.
    brokers = {pid for pid, argv in children.items() if b"java" in argv}
    workers = {pid for pid, argv in children.items() if b"rewardbus\0worker" in argv}
    assert len(brokers) == 1
    assert len(workers) == 2
    await _gone(brokers, 30)
    saved = load_checkpoint(checkpoints)
    assert saved is not None
    assert saved.step == RESUME_AT

    resumed = await asyncio.create_subprocess_exec(
        *_argv(checkpoints, plot, "--resume"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(resumed.communicate(), timeout=300)
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    assert resumed.returncode == 0, (result["error"], err.decode()[-3000:])

    events = read_applied_log(checkpoints / "applied.jsonl")
    applied = [e for e in events if e["event"] == "applied"]
    # No scored batch was applied twice, in either process or across them.
    ids = [e["batch_id"] for e in applied]
    assert len(ids) == len(set(ids))
    # The first process's steps up to its checkpoint, then the second's: each step once.
    first = [e for e in applied if e["incarnation"] == 0]
    second = [e for e in applied if e["incarnation"] == 1]
    lineage = [e["step"] for e in first if e["step"] < RESUME_AT] + [e["step"] for e in second]
    assert lineage == list(range(STEPS))
    assert all(e["batch_id"].endswith("-r1") for e in second)
    # What the first process had published after its checkpoint was read by the second
    # and skipped (its rollouts died with it); nothing before the position was read again.
    lost = {e["batch_id"] for e in first if e["step"] >= RESUME_AT}
    assert len(lost) >= KILL_AFTER - RESUME_AT
    skipped = {e["batch_id"] for e in events if e["event"] == "skipped"}
    assert lost <= skipped
    assert all(not e["batch_id"].endswith("-r1") for e in events if e["event"] == "skipped")
    assert {int(b.split("-step-")[1][:4]) for b in skipped} <= set(range(RESUME_AT, STEPS))
    assert result["skipped_batches"] == len(skipped)
    assert result["resumed_at"] == [RESUME_AT]

    # The curve goes on: the steps before the checkpoint are the first process's own, and
    # the resumed steps are the ones the killed process ran from the same state (same
    # weights, optimiser and sampling generator), within noise.
    by_step = result["reward_mean_by_step"]
    assert len(by_step) == STEPS
    assert result["rewards"] == STEPS * 16 * 4
    for step in range(RESUME_AT):
        assert by_step[step] == pytest.approx(before[step], abs=1e-3)
    redone = range(RESUME_AT, KILL_AFTER)
    assert sum(by_step[s] for s in redone) / len(redone) == pytest.approx(
        sum(before[s] for s in redone) / len(redone), abs=0.1
    )
    assert result["reward_mean_last"] >= result["reward_mean_first"] + 0.15
    assert plot.stat().st_size > 0
    # The killed run's workers, whose broker died under them, stopped within their stop
    # deadline (50 s after the signal) rather than waiting on it for ever.
    await _gone(set(children), 60)
