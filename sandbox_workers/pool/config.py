"""How a warm pool is sized and what its zygotes preload (:class:`PoolConfig`).

Part of :class:`~sandbox_workers.jail.JailConfig` (``pool``); it lives here, next
to the pool, so that the pool never imports the jail (the jail wires the pool in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_PRELOAD", "PoolConfig"]

# Modules a zygote imports before it forks: the harness's own and what judged
# solutions import most. Each costs start-up time once per zygote, never per run.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "site",
    "json",
    "resource",
    "select",
    "signal",
    "contextlib",
    "typing",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "math",
    "string",
    "re",
    "random",
    "fractions",
    "decimal",
    "statistics",
    "dataclasses",
    "traceback",
    "binascii",
    "copy",
    "operator",
    "ast",
    "array",
    "hashlib",
    "datetime",
)


@dataclass(frozen=True)
class PoolConfig:
    """Warm pools: pre-started, already jailed interpreters that fork each execution.

    Python, Ruby, PHP, R and Racket are pooled (V8 and the JVM cannot fork; see
    :mod:`sandbox_workers.pool`). A Python request runs in a zygote when ``argv[0]``
    is one of ``interpreters`` (empty: the worker's own base interpreter) and it is
    a ``-c`` command; with ``fork_at_open``, a request whose launch names
    ``warm_after`` (Ruby's, PHP's, R's, Racket's) runs in a zygote of its own
    command line that forked at its first open of that file. Zygotes are kept per
    start-up profile (options, environment, mounts), at most ``size`` in all.
    When a profile is first seen,
    ``ceil(size * prewarm)`` zygotes start (only as many as there is free room for,
    at least one: in a full pool one idle zygote of the least recently used other
    profile is retired for it) and its first requests wait for them;
    later, when every zygote of the profile is busy, one more starts in the
    background (up to ``size``) and the request runs cold. A zygote is retired
    after ``max_uses`` executions, and replaced when it dies or misbehaves.
    Network: consecutive executions of a zygote share a (loopback-only) network
    namespace as a slot's cold jails do (``JailConfig.fresh_net``).
    ``preload`` are modules imported before forking. ``keep_code`` are host files of
    marshalled modules (the worker's own, such as the judging harness; never user
    input; a body that only defines, and a ``main()`` run when it is ``__main__``)
    that a Python zygote loads and runs before forking too: an execution whose
    compiled entry file has the same bytes calls the zygote's ``main()`` instead of
    loading and running its own copy (``languages.python``), which in a forked
    interpreter costs 2-3 ms, mostly copy-on-write faults: every constant, function
    object and global written afresh. ``precompile`` are ``-c`` commands (the worker's
    own, such as Python's bootstraps; never user input) that a Python zygote compiles
    before forking: an execution whose ``-c`` command is one of them runs that code
    object instead of compiling it (the same code: the same source, file name and
    flags), which a forked interpreter paid ~0.25 ms of CPU for, mostly the
    compiler's fresh memory.
    """

    enabled: bool = True
    size: int = 4
    prewarm: float = 0.5
    max_uses: int = 500
    interpreters: tuple[str, ...] = ()
    preload: tuple[str, ...] = DEFAULT_PRELOAD
    keep_code: tuple[Path, ...] = ()
    precompile: tuple[str, ...] = ()
    start_timeout_s: float = 15.0
    retry_after_s: float = 30.0
    fork_at_open: bool = True

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("pool size must be at least 1")
        if not 0.0 <= self.prewarm <= 1.0:
            raise ValueError("prewarm is a fraction of the pool size, in [0, 1]")
        if self.max_uses < 1:
            raise ValueError("max_uses must be at least 1")

    @property
    def prewarm_count(self) -> int:
        """Zygotes started when a profile is first seen."""
        return math.ceil(self.size * self.prewarm)
