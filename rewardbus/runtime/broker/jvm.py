"""The Java side of a broker: finding and checking java and the jars, and the JVM's argv."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rewardbus.runtime.broker.config import KAFKA_VERSION, BrokerConfig, default_kafka_lib
from rewardbus.runtime.broker.errors import BrokerError

__all__ = ["KafkaRuntime", "resolve_runtime"]

_MIN_JAVA_MAJOR = 17


@dataclass(frozen=True)
class KafkaRuntime:
    """The java binary and jar directory one start() runs with."""

    java: Path
    lib: Path

    def command(self, config: BrokerConfig, log4j: Path, cds: list[str]) -> list[str]:
        """The JVM's argv up to (not including) the main class."""
        return [
            str(self.java),
            f"-Xmx{config.heap}",
            *((f"-Xms{config.heap}", "-XX:+AlwaysPreTouch") if config.preallocate_heap else ()),
            # A single-node broker needs neither a concurrent collector nor C2; both cost
            # start-up time and CPU on a 2-core machine.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            *cds,
            "-XX:-UsePerfData",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            "-Dlog4j2.disable.jmx=true",
            # Kafka logs while its own shutdown hook runs; log4j's hook would race it.
            "-Dlog4j2.shutdownHookEnabled=false",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.lib}/*",
        ]


def resolve_runtime(config: BrokerConfig) -> KafkaRuntime:
    """Find java and the jars; BrokerError says what to install when one is missing."""
    java = _find_java()
    _check_java(java)
    lib = config.kafka_lib or default_kafka_lib()
    _check_jars(lib)
    return KafkaRuntime(java=java, lib=lib)


def _find_java() -> Path:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java not found: install a Java 17+ runtime (apt-get install openjdk-17-jre-headless)"
        )
    return Path(found)


def _java_major_version(java: Path) -> int | None:
    """Read the major version from the JDK's `release` file: no JVM start needed."""
    release = java.resolve().parent.parent / "release"
    try:
        text = release.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("JAVA_VERSION="):
            version = line.partition("=")[2].strip().strip('"')
            head = version.split(".")[0]
            # Java 8 and older spell themselves 1.x.
            head = version.split(".")[1] if head == "1" and "." in version else head
            return int(head) if head.isdigit() else None
    return None


def _check_java(java: Path) -> None:
    major = _java_major_version(java)
    if major is not None and major < _MIN_JAVA_MAJOR:
        raise BrokerError(
            f"java at {java} is version {major}; Kafka {KAFKA_VERSION} needs Java "
            f"{_MIN_JAVA_MAJOR}+ (apt-get install openjdk-17-jre-headless, or set JAVA_HOME)"
        )


def _check_jars(lib: Path) -> None:
    if not any(lib.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Kafka jars not found in {lib}: run `make kafka-jars`")
