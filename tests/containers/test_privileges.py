"""The worker container's least privilege (docs/containers.md), shown and refused.

- With the least-privilege set (no ``--privileged``) ``rewardbus doctor`` inside the
  container reports every isolation layer active and strict mode ready.
- Started as an ordinary unprivileged container, a strict worker refuses to start
  (exit status 2) and names the layers that are missing.
"""

from __future__ import annotations

import asyncio

import docker
import pytest

from schemas import KafkaSettings
from tests.containers.harness import WORKER_IMAGE, least_privilege, worker_container

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _run(client: docker.DockerClient, command: list[str], **options: object) -> tuple[int, str]:
    container = client.containers.run(WORKER_IMAGE, command, detach=True, **options)
    try:
        status = container.wait(timeout=300)
        return int(status["StatusCode"]), container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


async def test_doctor_reports_strict_ready_with_least_privilege(
    docker_engine: docker.DockerClient,
) -> None:
    code, out = await asyncio.to_thread(_run, docker_engine, ["doctor"], **least_privilege())
    assert code == 0, out
    assert "strict mode: ready" in out, out
    assert "MISSING" not in out, out


async def test_unprivileged_worker_refuses_strict_mode(
    docker_engine: docker.DockerClient, ckafka: KafkaSettings
) -> None:
    container = worker_container(ckafka, "plain", privileges={})
    await asyncio.to_thread(container.start)
    try:
        wrapped = container.get_wrapped_container()
        status = await asyncio.to_thread(wrapped.wait, timeout=300)
        out = wrapped.logs().decode(errors="replace")
    finally:
        await asyncio.to_thread(container.stop)
    assert status["StatusCode"] == 2, out
    assert "isolation layers unavailable" in out, out
    # Docker's defaults lack CAP_SYS_ADMIN (namespaces, mounts) and a writable cgroup tree.
    for layer in ("namespaces", "mounts", "cgroup_memory", "cgroup_pids"):
        assert f"{layer}:" in out, (layer, out)
    assert "rewardbus doctor" in out, out
