"""The worker container's least privilege (docs/containers.md), shown and refused.

- With the least-privilege set (no ``--privileged``) ``rewardbus doctor`` inside the
  container reports every isolation layer active and strict mode ready.
- Each item of the set is needed: without it, doctor names the layer it costs.
- Started as an ordinary unprivileged container, a strict worker refuses to start
  (exit status 69, unavailable) and names the layers that are missing.
"""

from __future__ import annotations

import asyncio

import docker
import pytest

from rewardbus.errors import Unavailable
from schemas import KafkaSettings
from tests.containers.harness import WORKER_IMAGE, least_privilege, worker_container

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


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


def _without(item: str) -> dict[str, object]:
    options: dict[str, object] = dict(least_privilege())
    if item == "NET_ADMIN":
        options["cap_add"] = ["SYS_ADMIN"]
    elif item == "seccomp profile":
        options["security_opt"] = ["apparmor=unconfined"]  # Docker's default profile
    elif item == "private cgroupns":
        options["cgroupns"] = "host"
    return options


@pytest.mark.parametrize(
    ("item", "layer"),
    [
        ("NET_ADMIN", "namespaces"),  # "lo" up in the jail's net namespace
        ("seccomp profile", "mounts"),  # Docker's default denies pivot_root
        ("private cgroupns", "cgroup_memory"),  # the cgroup tree stays read-only
    ],
)
async def test_each_privilege_is_needed(
    docker_engine: docker.DockerClient, item: str, layer: str
) -> None:
    code, out = await asyncio.to_thread(_run, docker_engine, ["doctor"], **_without(item))
    assert code == 1, out
    missing = [line.split()[1] for line in out.splitlines() if line.strip().startswith("MISSING")]
    assert layer in missing, (item, out)
    assert "strict mode: REFUSES" in out, out


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
    assert status["StatusCode"] == Unavailable.exit_code == 69, out
    assert "isolation layers unavailable" in out, out
    # Docker's defaults lack CAP_SYS_ADMIN (namespaces, mounts) and a writable cgroup tree.
    for layer in ("namespaces", "mounts", "cgroup_memory", "cgroup_pids"):
        assert f"{layer}:" in out, (layer, out)
    assert "rewardbus doctor" in out, out
