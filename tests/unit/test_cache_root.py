"""One cache-root rule ($REWARDBUS_CACHE, else ~/.cache/rewardbus), followed by every user."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardbus.runtime.broker import KAFKA_VERSION, default_kafka_lib
from sandbox_workers.jail import JailConfig
from schemas import CACHE_ENV, cache_root


def test_the_environment_overrides_the_user_cache() -> None:
    assert cache_root({CACHE_ENV: "/var/cache/rb"}) == Path("/var/cache/rb")
    assert cache_root({}) == Path.home() / ".cache" / "rewardbus"
    assert cache_root({CACHE_ENV: ""}) == Path.home() / ".cache" / "rewardbus"  # set but empty


def test_the_broker_jars_and_the_jail_use_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REWARDBUS_KAFKA_LIB", raising=False)
    monkeypatch.setenv(CACHE_ENV, "/var/cache/rb")
    assert default_kafka_lib() == Path(f"/var/cache/rb/kafka-{KAFKA_VERSION}/lib")
    assert JailConfig().cache_dir == Path("/var/cache/rb")
