"""A real Jaeger v2 for the session, on free ports of 127.0.0.1.

The binary is the project's cached build (``make observability-tools`` builds it
before the tests; building here would take minutes inside a test's timeout).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rewardbus.observability.gotools import JAEGER
from rewardbus.observability.jaeger import JaegerConfig, JaegerProcess
from rewardbus.observability.jaeger_query import JaegerQuery
from schemas import cache_root
from tests.observability.metered import metered, prometheus, prometheus_binary  # noqa: F401 -- fixtures of the metrics tests


@pytest.fixture(scope="session")
def jaeger_binary() -> str:
    binary = cache_root(os.environ) / "bin" / JAEGER.binary_name
    if not binary.is_file():
        pytest.fail(
            f"{binary} is missing: `make observability-tools` builds it "
            "(`make test` runs that first)"
        )
    return str(binary)


@pytest.fixture(scope="session")
def jaeger(jaeger_binary: str) -> Iterator[JaegerProcess]:
    """A running Jaeger (in-memory store); every port picked free."""
    config = JaegerConfig(otlp_grpc_port=0, otlp_http_port=0, query_port=0, query_grpc_port=0)
    with JaegerProcess(config, binary=Path(jaeger_binary)) as running:
        yield running


@pytest.fixture(scope="session")
def jaeger_query(jaeger: JaegerProcess) -> JaegerQuery:
    return JaegerQuery(jaeger.config.query_url)
