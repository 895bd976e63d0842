"""The strict jail the sandbox tests run, with a given warm pool, and Python programs for it;
jails launched on a slot's spawner directly, for what no JailSandbox path reaches."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.jail.build import build
from sandbox_workers.jail.process import Launch, Spawner
from sandbox_workers.pool import PoolConfig
from sandbox_workers.sandbox import BindMount, ExecRequest

PREFIX = Path(sys.base_prefix).resolve()
PYTHON = str(PREFIX / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
MOUNTS = (BindMount(PREFIX, str(PREFIX)),)
# What the executor sends for Python (languages/python.py): a hash seed, -S, -B.
ENV = {"PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def strict_sandbox(pool: PoolConfig, *, fresh_net: bool = False) -> JailSandbox:
    """A strict jail with ``pool``; the test fails (never skips) where this host has none."""
    try:
        return JailSandbox(JailConfig(pool=pool, fresh_net=fresh_net))
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")


def py(
    code: str, *args: str, options: tuple[str, ...] = ("-S", "-B"), **fields: Any
) -> ExecRequest:
    """The jail's own Python running ``code``, as the executor runs Python programs."""
    fields.setdefault("env", ENV)
    return ExecRequest(argv=(PYTHON, *options, "-c", code, *args), extra_mounts=MOUNTS, **fields)


def bare_spawner(*, share_net: bool = False) -> Spawner:
    """A slot's spawner with no cgroups, for jails launched on it directly."""
    return Spawner(str(build(JailConfig().bin_dir).launcher), [], share_net=share_net)


def bare_options(workdir: Path, *argv: str) -> list[str]:
    """A namespaced jail without the mounts layer running ``argv`` in ``workdir``,
    waiting for "go" as the worker's jails do."""
    return ["--ns", "--no-mounts", "--wait-go", "--workdir", str(workdir), "--", *argv]


async def launched(spawner: Spawner, options: Sequence[str]) -> Launch:
    """A jail of ``spawner`` with ``options``: built, and its program let go."""
    launch = Launch(b"", 1 << 16)
    await launch.start(spawner, options)
    os.close(await launch.ready(10))
    launch.go()
    return launch


async def finished(launch: Launch) -> bytes:
    """The program's stdout once the jail has ended (its program must exit 0)."""
    try:
        await launch.finish(10)
        assert launch.report is not None and launch.report.exit_code == 0, launch.error
        return launch.stdout
    finally:
        launch.close()
