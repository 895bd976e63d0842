"""Where rewardbus keeps what it builds and fetches: one rule for every package.

``$REWARDBUS_CACHE``, else ``~/.cache/rewardbus`` (the Makefile and the shell scripts
under infra/ spell the same rule). The environment is passed in, never read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_root"]

CACHE_ENV = "REWARDBUS_CACHE"


def cache_root(env: Mapping[str, str]) -> Path:
    """The cache directory: ``env[CACHE_ENV]`` when set and not empty, else the user's."""
    return Path(env.get(CACHE_ENV) or Path.home() / ".cache" / "rewardbus")
