"""Where a broker's files live inside its data directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DataLayout"]


@dataclass(frozen=True)
class DataLayout:
    """The paths of one broker's configuration, log and storage under `root`."""

    root: Path

    @property
    def server_properties(self) -> Path:
        """Kafka's configuration file, written at every start."""
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        """The log4j2 configuration the JVM is pointed at."""
        return self.root / "log4j2.properties"

    @property
    def broker_log(self) -> Path:
        """The broker's stdout and stderr."""
        return self.root / "broker.log"

    @property
    def log_dir(self) -> Path:
        """Kafka's storage (`log.dirs`)."""
        return self.root / "kraft-logs"

    @property
    def formatted(self) -> bool:
        """True once the storage tool has formatted `log_dir`."""
        return (self.log_dir / "meta.properties").exists()
