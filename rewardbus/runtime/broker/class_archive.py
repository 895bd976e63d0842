"""Application class-data sharing (CDS) for the Kafka JVM: start-up ~2.0 s -> ~1.1 s.

The first broker on a given Java build and jar set dumps the classes it loaded when it
exits; later JVMs map that archive instead of loading and verifying the same classes
again. The archive's name carries fingerprints of the Java build and of the jar set, so
a new Java or a new jar set gets an archive of its own.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

from rewardbus.runtime.broker.jvm import KafkaRuntime

__all__ = ["ClassArchive"]

# Class-data sharing explains every class it skips; none of that is actionable here.
_QUIET_CDS = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


class ClassArchive:
    """The class-data archive of one Java build and jar set, next to the jar directory.

    Best effort: an unwritable cache or a killed broker means no archive, and
    -Xshare:auto ignores an archive that does not match.
    """

    def __init__(self, runtime: KafkaRuntime) -> None:
        self._prefix = f"kafka-cds-{_java_fingerprint(runtime.java)}-"
        self.path = runtime.lib.parent / f"{self._prefix}{_jars_fingerprint(runtime.lib)}.jsa"
        self._pending: Path | None = None

    def use_flags(self) -> list[str]:
        """Map the archive if there is one."""
        return [f"-XX:SharedArchiveFile={self.path}", *_QUIET_CDS] if self.path.is_file() else []

    def broker_flags(self) -> list[str]:
        """Map the archive, or have this JVM write one at exit if none exists yet."""
        if self.path.is_file() or not os.access(self.path.parent, os.W_OK):
            return self.use_flags()
        # A private name: brokers starting together each dump their own, the last one wins.
        self._pending = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:12]}.tmp")
        return [f"-XX:ArchiveClassesAtExit={self._pending}", *_QUIET_CDS]

    def finish(self, *, clean_exit: bool) -> None:
        """Publish the archive the broker wrote at a clean exit; discard a partial one."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if not (clean_exit and pending.is_file()):
            pending.unlink(missing_ok=True)
            return
        os.replace(pending, self.path)
        # Archives of this Java for older jar sets are dead weight (~50 MB each).
        for stale in self.path.parent.glob(f"{self._prefix}*.jsa"):
            if stale != self.path:
                stale.unlink(missing_ok=True)


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:12]


def _java_fingerprint(java: Path) -> str:
    release = java.resolve().parent.parent / "release"
    try:
        build = release.read_bytes()
    except OSError:
        build = b""
    return _digest(str(java.resolve()).encode(), build)


def _jars_fingerprint(lib: Path) -> str:
    jars = sorted(lib.glob("*.jar"))
    return _digest(
        *(f"{jar.name}:{jar.stat().st_size}:{jar.stat().st_mtime_ns}".encode() for jar in jars)
    )
