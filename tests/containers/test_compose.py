"""The compose deployment as an operator runs it: `make compose-up`, `make compose-demo`.

Three KRaft brokers, Jaeger, Prometheus, two sandbox worker replicas and the
aggregator from infra/compose/docker-compose.yml, on the project's own images, under a
project name of its own (its network and volumes go with it) and free host ports. The
demo (`rewardbus demo --workers 0` in a container on that network) must be judged by
the worker replicas and scored by the compose aggregator; Prometheus must scrape every
replica and the aggregator; Jaeger must hold the traces of all three services.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from rewardbus.runtime.ports import free_ports
from tests.containers.harness import SECCOMP_PROFILE
from tests.support.poll import until_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "infra" / "compose" / "docker-compose.yml"
WORKERS = 2


class Deployment:
    """One `docker-compose -p NAME` project, with its Jaeger and Prometheus ports."""

    def __init__(self) -> None:
        self.name = f"rbtest{uuid.uuid4().hex[:8]}"
        self.jaeger_port, self.prometheus_port = free_ports("127.0.0.1", 2)
        self.env = {
            **os.environ,
            "REWARDBUS_SECCOMP_PROFILE": str(SECCOMP_PROFILE),
            "REWARDBUS_JAEGER_UI_PORT": str(self.jaeger_port),
            "REWARDBUS_PROMETHEUS_PORT": str(self.prometheus_port),
        }

    def compose(
        self, *args: str, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker-compose", "-p", self.name, "-f", str(COMPOSE_FILE), *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def get(self, port: int, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return json.load(answer)


@pytest.fixture(scope="module")
def deployment(docker_engine: docker.DockerClient) -> Iterator[Deployment]:
    images = subprocess.run(
        [str(ROOT / "infra" / "compose" / "observability-images.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert images.returncode == 0, images.stderr[-2000:]
    deployed = Deployment()
    started = time.monotonic()
    up = deployed.compose("up", "-d", "--scale", f"worker={WORKERS}")
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        print(f"compose up: {time.monotonic() - started:.1f} s")
        yield deployed
    finally:
        down = deployed.compose("down", "-v")
        assert down.returncode == 0, down.stderr[-3000:]


def test_the_demo_is_judged_by_the_compose_workers(deployment: Deployment) -> None:
    started = time.monotonic()
    # DEMO_LIMIT is read by compose itself (the demo service's command), not the container.
    demo = deployment.compose(
        "--profile", "demo", "run", "--rm", "demo", timeout=600, DEMO_LIMIT="10"
    )
    print(f"compose demo: {time.monotonic() - started:.1f} s")
    assert demo.returncode == 0, (demo.stdout + demo.stderr)[-3000:]
    assert "20/20 rewarded by the deployment's workers" in demo.stdout, demo.stdout
    assert "10/10 accepted" in demo.stdout and "0/10 accepted" in demo.stdout
    assert "result            OK" in demo.stdout

    def scraped() -> bool:
        targets = deployment.get(deployment.prometheus_port, "/api/v1/targets")
        up = [t["labels"]["job"] for t in targets["data"]["activeTargets"] if t["health"] == "up"]
        return sorted(up) == ["rewardbus-aggregator"] + ["rewardbus-worker"] * WORKERS

    until_sync(
        scraped,
        lambda: f"every target up: {deployment.get(deployment.prometheus_port, '/api/v1/targets')}",
        timeout_s=60,
        every_s=1,
        ignoring=(OSError,),  # the server is not answering yet
    )

    def judged() -> float:
        query = "/api/v1/query?query=sum(rewardbus_worker_completions_total)"
        result = deployment.get(deployment.prometheus_port, query)["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    until_sync(
        lambda: judged() >= 20,
        lambda: f"20 judged completions in Prometheus, {judged()} so far",
        timeout_s=60,
        every_s=1,
        ignoring=(OSError,),
    )
    rules = deployment.get(deployment.prometheus_port, "/api/v1/rules")["data"]["groups"]
    assert sum(len(group["rules"]) for group in rules) > 0  # infra/prometheus's rules

    def traced() -> bool:
        services = set(deployment.get(deployment.jaeger_port, "/api/services")["data"] or [])
        return {"rewardbus-demo", "rewardbus-worker", "rewardbus-aggregator"} <= services

    until_sync(
        traced,
        lambda: f"each service's traces: {deployment.get(deployment.jaeger_port, '/api/services')}",
        timeout_s=60,
        every_s=1,
        ignoring=(OSError,),
    )
