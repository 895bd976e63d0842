"""What the built wheel carries, and the one log4j2 configuration of the Kafka broker."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "kafkaio", "producers", "consumers", "sandbox_workers", "rewardbus")
LOG4J = "rewardbus/runtime/broker/log4j2.properties"


def _source_files(*paths: str) -> list[str]:
    """Files of the working tree git tracks or would track (new, not ignored) under paths."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Names in a wheel built from a clean copy of the sources (a stale build/ of the
    checkout would add files the sources no longer have)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in _source_files("pyproject.toml", "README.md", *PACKAGES):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(work / "dist"), str(source)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    (wheel,) = (work / "dist").glob("rewardbus-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_wheel_carries_every_package_file(wheel_names: set[str]) -> None:
    # Package data (py.typed, the jail's C sources, canary goldens, log4j2.properties)
    # is read at run time; a README inside a package is for people reading the repo.
    expected = {name for name in _source_files(*PACKAGES) if not name.endswith("README.md")}
    assert LOG4J in expected
    assert expected - wheel_names == set()


def test_the_installed_broker_reads_its_log4j_config_from_the_package() -> None:
    from rewardbus.runtime.broker import log4j2_properties

    assert log4j2_properties() == (ROOT / LOG4J).read_text(encoding="utf-8")
    assert "logger.raftserver.name = kafka.server.KafkaRaftServer" in log4j2_properties()


def test_there_is_one_log4j_config_and_the_kafka_image_copies_it() -> None:
    assert [name for name in _source_files(".") if name.endswith("log4j2.properties")] == [LOG4J]
    images = (ROOT / "infra" / "docker" / "images.sh").read_text(encoding="utf-8")
    copied = re.findall(r'"\$repo/([^"]*log4j2\.properties)"', images)
    assert copied == [LOG4J]
