"""Compiled artifacts by content: an in-memory LRU over an optional directory.

Keys are digests of (language, toolchain version, compile command, source), so
a toolchain upgrade or a flag change never serves a stale binary. Deterministic
compile *errors* are cached too: a GRPO group often holds the same broken
program several times. Concurrent requests for one key share one compilation.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec

__all__ = ["Artifact", "CacheStats", "CompileCache", "artifact_key", "replace_file"]

_FORMAT = "rewardbus-artifact-v1"


class Artifact(msgspec.Struct, frozen=True):
    """The result of one compilation: files on success, the compiler's message on failure."""

    ok: bool
    files: dict[str, bytes] = {}
    message: str = ""

    @property
    def size(self) -> int:
        """Bytes held in memory."""
        return sum(len(data) for data in self.files.values()) + len(self.message)


@dataclass
class CacheStats:
    """Counters for metrics: hits in memory, hits on disk, compilations."""

    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0


def artifact_key(*parts: str) -> str:
    """A content digest of the parts that determine a compilation's output."""
    digest = hashlib.sha256(_FORMAT.encode())
    for part in parts:
        encoded = part.encode("utf-8", errors="surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()


class CompileCache:
    """Artifacts by key: memory first (bounded by bytes), then ``directory``."""

    def __init__(self, directory: Path | None, max_bytes: int = 256 << 20) -> None:
        self._directory = directory
        self._max_bytes = max_bytes
        self._memory: OrderedDict[str, Artifact] = OrderedDict()
        self._bytes = 0
        self._pending: dict[str, asyncio.Future[Artifact]] = {}
        self.stats = CacheStats()
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    async def get_or_build(
        self, key: str, build: Callable[[], Awaitable[tuple[Artifact, bool]]]
    ) -> Artifact:
        """The artifact for ``key``, compiling it with ``build`` when absent.

        ``build`` returns the artifact and whether it may be cached (a compile
        that timed out under load may succeed next time). Its exceptions reach
        every caller waiting on the same key.
        """
        while True:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                self.stats.memory_hits += 1
                return found
            pending = self._pending.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if _cancelling():
                    raise
                # The task compiling it was cancelled, not this one: try again.
        future: asyncio.Future[Artifact] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            artifact = await self._load_or_build(key, build)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            # Mark it retrieved: with no waiter, nobody else will.
            future.exception()
            raise
        else:
            future.set_result(artifact)
            return artifact
        finally:
            del self._pending[key]

    async def _load_or_build(
        self, key: str, build: Callable[[], Awaitable[tuple[Artifact, bool]]]
    ) -> Artifact:
        stored = await asyncio.to_thread(self._read, key)
        if stored is not None:
            self.stats.disk_hits += 1
            self._remember(key, stored)
            return stored
        self.stats.misses += 1
        artifact, cacheable = await build()
        if cacheable:
            self._remember(key, artifact)
            await asyncio.to_thread(self._write, key, artifact)
        return artifact

    def _remember(self, key: str, artifact: Artifact) -> None:
        if artifact.size > self._max_bytes:
            return
        self._memory[key] = artifact
        self._bytes += artifact.size
        while self._bytes > self._max_bytes:
            _, evicted = self._memory.popitem(last=False)
            self._bytes -= evicted.size

    def _path(self, key: str) -> Path | None:
        if self._directory is None:
            return None
        return self._directory / key[:2] / f"{key}.msgpack"

    def _read(self, key: str) -> Artifact | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            return msgspec.msgpack.decode(path.read_bytes(), type=Artifact)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError):
            # A torn or foreign file is a miss; the rebuild overwrites it.
            return None

    def _write(self, key: str, artifact: Artifact) -> None:
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            replace_file(path, msgspec.msgpack.encode(artifact))


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file, then rename it to ``path``: a reader never sees
    a partial file, and concurrent writers of the same content do not collide."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
