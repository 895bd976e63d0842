"""Which requests a warm pool can serve, and what is fixed per zygote.

A Python zygote is an interpreter started as ``<python> <options> -c <zygote>`` with
the environment and extra mounts of the executions it serves, so everything an
interpreter settles at start-up (``sys.flags``, ``sys.path``, the hash seed,
the warnings filters, the standard streams' encodings) is what a fresh
``<python> <options> -c CODE`` would have. A request is served by a zygote when
its interpreter, options, environment and extra mounts are exactly the
zygote's :class:`Profile` and it runs ``-c CODE [ARG...]``; anything else (a
script path, ``-m``, ``-i``, options that print at start-up) runs cold.

Any other interpreter is pooled when its request names ``warm_after`` (the
program file it opens first once started: Ruby's and PHP's launches do): its
zygote runs the request's very command line, environment and mounts, with
``librbjail-warm.so`` preloaded, and forks each execution inside that first
open. A request is served by such a zygote when its whole command line,
environment, mounts and ``warm_after`` are the zygote's :class:`Profile`.
"""

from __future__ import annotations

import importlib.machinery
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from sandbox_workers.sandbox import BindMount, ExecRequest

__all__ = ["PooledCommand", "Profile", "pooled_command", "shadowed_modules"]

# Switches that only shape the start-up configuration, which the zygote shares.
# Not d/v (print while starting and exiting), i (interactive), x, m, h, V.
_FLAG_LETTERS = frozenset("BEIOPRSbqsu")
# -X options that only set configuration; others install handlers or print
# (faulthandler, dev, importtime, showrefcount, tracemalloc).
_X_OPTIONS = frozenset({"utf8", "utf8=0", "utf8=1", "warn_default_encoding", "no_debug_ranges"})
_X_PREFIXES = ("int_max_str_digits=",)


@dataclass(frozen=True)
class Profile:
    """What a zygote is started with; requests must match it exactly.

    ``trigger``: None for a Python zygote (``options`` are the interpreter's
    start-up options); else the file name whose first open (first read:
    ``on_read``) makes the interpreter a zygote, and ``options`` are the rest of
    its command line.
    """

    interpreter: str
    options: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[BindMount, ...]
    trigger: str | None = None
    on_read: bool = False


@dataclass(frozen=True)
class PooledCommand:
    """A request a zygote of ``profile`` can run: ``-c code`` with ``sys.argv[1:] == args``."""

    profile: Profile
    code: str
    args: tuple[str, ...]


def _x_option_ok(value: str) -> bool:
    return value in _X_OPTIONS or value.startswith(_X_PREFIXES)


def _flags_ok(letters: str) -> bool:
    return bool(letters) and set(letters) <= _FLAG_LETTERS


def _option(argv: tuple[str, ...], i: int) -> list[str] | None:
    """The start-up option at ``argv[i]`` (with its value), None if a zygote cannot share it."""
    arg = argv[i]
    if arg in ("-W", "-X"):
        if i + 1 >= len(argv) or (arg == "-X" and not _x_option_ok(argv[i + 1])):
            return None
        return [arg, argv[i + 1]]
    if arg.startswith("-W") or (arg.startswith("-X") and _x_option_ok(arg[2:])):
        return [arg]
    if arg.startswith("-") and _flags_ok(arg[1:]):
        return [arg]
    return None


def _split_command(argv: tuple[str, ...]) -> tuple[list[str], str, tuple[str, ...]] | None:
    """(options, code, args) of ``argv[1:]`` when it is ``[options] -c CODE [ARG...]``."""
    options: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and not arg.startswith(("--", "-W", "-X")) and "c" in arg:
            # "-Sc CODE", "-cCODE": switches, then -c with the rest or the next word.
            flags, _, inline = arg[1:].partition("c")
            if flags and not _flags_ok(flags):
                return None
            options += [f"-{flags}"] if flags else []
            if inline:
                return options, inline, argv[i + 1 :]
            if i + 1 >= len(argv):
                return None
            return options, argv[i + 1], argv[i + 2 :]
        option = _option(argv, i)
        if option is None:
            return None
        options += option
        i += len(option)
    return None


def pooled_command(
    request: ExecRequest, interpreters: Collection[str], *, fork_at_open: bool = True
) -> PooledCommand | None:
    """The request as a zygote command, or None when it must run cold.

    ``interpreters``: the Python interpreters pooled; ``fork_at_open``: whether
    requests that name ``warm_after`` are (module docstring).
    """
    argv = request.argv
    if request.warm_after is not None:
        if not (fork_at_open and argv):
            return None
        profile = Profile(
            interpreter=argv[0],
            options=argv[1:],
            env=tuple(request.env.items()),
            mounts=request.extra_mounts,
            trigger=PurePosixPath(request.warm_after).name,
            on_read=request.warm_on_read,
        )
        return PooledCommand(profile=profile, code="", args=())
    if not argv or argv[0] not in interpreters:
        return None
    split = _split_command(argv)
    if split is None:
        return None
    options, code, args = split
    profile = Profile(
        interpreter=argv[0],
        options=tuple(options),
        # In order: the environment's order is visible (os.environ, /proc/self/environ).
        env=tuple(request.env.items()),
        mounts=request.extra_mounts,
    )
    return PooledCommand(profile=profile, code=code, args=args)


def shadowed_modules(names: Iterable[str]) -> list[str]:
    """Top-level module names that files placed in the work dir would provide.

    A fresh interpreter finds these on ``sys.path[0]`` (the work dir) before the
    standard library; a zygote that preloaded one must forget it.
    """
    suffixes = sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
    found: set[str] = set()
    for name in names:
        head, sep, _ = name.partition("/")
        if sep:
            found.add(head)  # a package or namespace directory
            continue
        for suffix in suffixes:
            if head.endswith(suffix) and len(head) > len(suffix):
                found.add(head[: -len(suffix)])
                break
    return sorted(found)
