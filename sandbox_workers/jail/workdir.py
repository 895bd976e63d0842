"""Placing request files into a jail's /work and reading results back out.

Both go through a directory fd the jail's init handed over, never through a
path: the fd keeps the private tmpfs alive after the jail is gone, and every
lookup below it refuses symlinks, so a program cannot point a collected name at
a host file (the worker reads as root).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from fnmatch import fnmatchcase

from sandbox_workers.sandbox import SandboxFault

__all__ = ["collect_files", "validate_name", "write_files"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_ENTRIES = 20_000  # walk budget: a program can create many files, we look at few
_MAX_DEPTH = 32


def validate_name(name: str) -> tuple[str, ...]:
    """Split a work-dir-relative file name; ValueError if it could leave /work."""
    parts = tuple(name.split("/"))
    if not name or name.startswith("/") or "\0" in name:
        raise ValueError(f"invalid file name for the work directory: {name!r}")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid file name for the work directory: {name!r}")
    return parts


def _open_dir(parent: int, name: str, *, create: bool, owner: tuple[int, int] | None) -> int:
    if create:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
            if owner is not None:
                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            pass
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _write_one(
    workfd: int, parts: tuple[str, ...], data: bytes, mode: int, owner: tuple[int, int] | None
) -> None:
    dirfd = os.dup(workfd)
    try:
        for part in parts[:-1]:
            sub = _open_dir(dirfd, part, create=True, owner=owner)
            os.close(dirfd)
            dirfd = sub
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, mode, dir_fd=dirfd)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # the umask must not strip the exec bit
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    finally:
        os.close(dirfd)


def write_files(
    workfd: int,
    files: Mapping[str, bytes],
    executables: frozenset[str],
    owner: tuple[int, int] | None,
) -> None:
    """Create ``files`` below the work dir, owned by the jail's uid (0755 for executables)."""
    for name, data in files.items():
        parts = validate_name(name)
        mode = 0o755 if name in executables else 0o644
        try:
            _write_one(workfd, parts, data, mode, owner)
        except OSError as exc:
            raise SandboxFault(f"cannot place {name!r} in the work directory: {exc}") from exc


def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Glob match by path component; ``**`` spans any number of directories."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])


_Found = tuple[int, tuple[str, ...], str]


def _walk(dirfd: int, prefix: tuple[str, ...], budget: list[int]) -> Iterator[_Found]:
    """(dir fd, relative parts, name) of every regular file; never follows symlinks."""
    with os.scandir(dirfd) as entries:
        names = sorted(
            (e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False))
            for e in entries
        )
    for name, is_dir, is_file in names:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if is_file:
            yield dirfd, (*prefix, name), name
        elif is_dir and len(prefix) < _MAX_DEPTH:
            try:
                sub = os.open(name, _DIR_FLAGS, dir_fd=dirfd)
            except OSError:
                continue
            try:
                yield from _walk(sub, (*prefix, name), budget)
            finally:
                os.close(sub)


def _read_regular(dirfd: int, name: str, limit: int) -> bytes | None:
    """The file's bytes if it is a regular file of at most ``limit`` bytes."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dirfd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        chunks = []
        remaining = info.st_size
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def collect_files(workfd: int, patterns: tuple[str, ...], max_bytes: int) -> dict[str, bytes]:
    """Regular files under the work dir matching any pattern, up to ``max_bytes`` in total.

    Files that would push the total past ``max_bytes`` are left out.
    """
    if not patterns:
        return {}
    compiled = [tuple(p.strip("/").split("/")) for p in patterns]
    found: dict[str, bytes] = {}
    left = max_bytes
    for dirfd, parts, name in _walk(workfd, (), [_MAX_ENTRIES]):
        if not any(_match(p, parts) for p in compiled):
            continue
        data = _read_regular(dirfd, name, left)
        if data is not None:
            found["/".join(parts)] = data
            left -= len(data)
    return found
