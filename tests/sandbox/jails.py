"""The strict jail the sandbox tests run, with a given warm pool."""

from __future__ import annotations

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig


def strict_sandbox(pool: PoolConfig) -> JailSandbox:
    """A strict jail with ``pool``; the test fails (never skips) where this host has none."""
    try:
        return JailSandbox(JailConfig(pool=pool))
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
