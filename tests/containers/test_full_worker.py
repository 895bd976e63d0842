"""The deployable worker image judges every language it ships, inside a container.

`make images` builds rewardbus-worker with all twenty-two toolchains: the image a deployment
runs. The other container tests start the four-language worker of `make test-images`,
because the 3.9 GB full image takes minutes per container start on this machine's vfs
engine. Here the full image, under the least-privilege set alone, reports all twenty-two
languages and strict mode ready, and judges a right and a wrong program in each
language through `rewardbus judge`, in one container.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import pytest

from schemas import Completion, Verdict, encode_json
from tests.containers.harness import FULL_WORKER_IMAGE, FULL_WORKER_LANGUAGES, least_privilege
from tests.sandbox.test_languages import IO, LIMITS, PROGRAMS, SQL_IO

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

ENTRYPOINT = "/opt/rewardbus/payload/worker-entrypoint.sh"


def _completions() -> list[Completion]:
    """Per language, its right program and a wrong one (a crash where none answers wrong)."""
    completions = []
    for language in FULL_WORKER_LANGUAGES:
        programs = PROGRAMS[language]
        wrong = Verdict.WRONG_ANSWER if Verdict.WRONG_ANSWER in programs else Verdict.RUNTIME_ERROR
        for verdict in (Verdict.ACCEPTED, wrong):
            completions.append(
                Completion(
                    sample_id=f"{language}-{verdict.value}",
                    language=language,
                    code=programs[verdict],
                    tests=SQL_IO if language == "sql" else IO,
                    limits=LIMITS,
                )
            )
    return completions


def _run(client: docker.DockerClient, inputs: Path) -> tuple[int, str]:
    # Doctor, then judge, in one container: each start copies the whole image (vfs).
    script = f"{ENTRYPOINT} doctor && {ENTRYPOINT} judge /in/completions.jsonl"
    container = client.containers.run(
        FULL_WORKER_IMAGE,
        ["-c", script],
        entrypoint="/bin/sh",
        volumes={str(inputs): {"bind": "/in", "mode": "ro"}},
        detach=True,
        **least_privilege(),
    )
    try:
        status = container.wait(timeout=1400)
        return int(status["StatusCode"]), container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


def test_the_full_worker_judges_every_language_in_strict_mode(
    docker_engine: docker.DockerClient, tmp_path: Path
) -> None:
    completions = _completions()
    lines = b"".join(encode_json(completion) + b"\n" for completion in completions)
    (tmp_path / "completions.jsonl").write_bytes(lines)
    tmp_path.chmod(0o755)
    code, out = _run(docker_engine, tmp_path)
    assert code == 0, out[-4000:]
    assert "strict mode: ready" in out and "MISSING" not in out, out[-4000:]
    table = out.split("\nlanguages: ", 1)[1].split("\nstrict mode:", 1)[0]
    listed = {line.split()[1] for line in table.splitlines()[1:] if line.split()[0] == "ok"}
    assert listed == set(FULL_WORKER_LANGUAGES), table
    events: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            events[event["sample_id"]] = event
    verdicts = {sample: event["verdict"] for sample, event in events.items()}
    expected = {c.sample_id: c.sample_id.split("-", 1)[1] for c in completions}
    assert verdicts == expected, out[-4000:]
