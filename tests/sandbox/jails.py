"""The strict jail the sandbox tests run, with a given warm pool, and Python programs for it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
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
