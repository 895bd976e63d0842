"""Sandbox fixtures: the hostile and pollution corpora run with warm pools off and on.

``jail_config`` is parametrised per module: every test of a module using it
runs once against cold jails (a fresh interpreter per execution) and once
against a warm pool (zygotes forking each execution), unchanged. ``cold`` and
``warm`` are one strict jail of each kind per module, for tests that compare them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox_workers.jail import IsolationUnavailable, JailConfig, JailSandbox
from sandbox_workers.pool import PoolConfig
from tests.sandbox.jails import strict_sandbox

# Two zygotes, both started (and waited for) when the first Python request
# arrives: the pollution test counts the worker's fds after that first request.
WARM = PoolConfig(size=2, prewarm=1.0)


@pytest.fixture(scope="module", params=["cold", "warm"])
def jail_config(request: pytest.FixtureRequest) -> JailConfig:
    """A strict jail configuration, with the warm pool off ("cold") or on ("warm")."""
    if request.param == "cold":
        return JailConfig(pool=PoolConfig(enabled=False))
    return JailConfig(pool=WARM)


@pytest.fixture(scope="module")
def jail(jail_config: JailConfig) -> Iterator[JailSandbox]:
    """Module-wide sandbox, once cold and once warm (``jail_config`` in conftest.py)."""
    try:
        sandbox = JailSandbox(jail_config)
    except IsolationUnavailable as exc:
        pytest.fail(f"this host cannot run the strict jail (see rewardbus doctor): {exc}")
    yield sandbox
    stats = sandbox.pool_stats
    sandbox.close()
    if jail_config.pool.enabled:
        assert stats is not None and stats.served > 0, "the warm run never used the pool"


@pytest.fixture(scope="module")
def cold() -> Iterator[JailSandbox]:
    """A strict jail with the warm pool off."""
    sandbox = strict_sandbox(PoolConfig(enabled=False))
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="module")
def warm() -> Iterator[JailSandbox]:
    """A strict jail with a warm pool of two zygotes, started with each new profile."""
    sandbox = strict_sandbox(PoolConfig(size=2, prewarm=1.0))
    yield sandbox
    sandbox.close()
