"""The supported languages and their discovery.

``LANGUAGES`` is the table; :func:`discover_toolchains` finds which of them this
host can run, once, at start-up (``rewardbus doctor`` reports the result).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from sandbox_workers.languages.base import (
    BASE_ENV,
    WORKDIR,
    CompileStep,
    Language,
    Launch,
    Toolchain,
    utf8,
)
from sandbox_workers.languages.csharp import CSharp
from sandbox_workers.languages.d import D
from sandbox_workers.languages.go import Go
from sandbox_workers.languages.haskell import Haskell
from sandbox_workers.languages.java import Java
from sandbox_workers.languages.javascript import JavaScript
from sandbox_workers.languages.kotlin import Kotlin
from sandbox_workers.languages.lua import Lua
from sandbox_workers.languages.native import C, Cpp
from sandbox_workers.languages.ocaml import OCaml
from sandbox_workers.languages.perl import Perl
from sandbox_workers.languages.php import Php
from sandbox_workers.languages.python import Python
from sandbox_workers.languages.r import R
from sandbox_workers.languages.racket import Racket
from sandbox_workers.languages.ruby import Ruby
from sandbox_workers.languages.rust import Rust
from sandbox_workers.languages.scala import Scala
from sandbox_workers.languages.shell import Bash
from sandbox_workers.languages.sql import Sql
from sandbox_workers.languages.typescript import TypeScript
from schemas import cache_root

__all__ = [
    "BASE_ENV",
    "LANGUAGES",
    "WORKDIR",
    "CompileStep",
    "Language",
    "Launch",
    "Toolchain",
    "discover_toolchains",
    "fetched_toolchains",
    "lookup",
    "utf8",
]

_ALL: tuple[Language, ...] = (
    Python(), JavaScript(), C(), Cpp(), Go(), Java(), Rust(), Bash(), Sql(), Perl(),
    TypeScript(), Php(), Ruby(), Lua(), R(), Racket(), D(), CSharp(), Kotlin(), Scala(),
    Haskell(), OCaml(),
)  # fmt: skip

LANGUAGES: Mapping[str, Language] = {language.name: language for language in _ALL}

_BY_ALIAS: Mapping[str, Language] = {
    alias: language for language in LANGUAGES.values() for alias in language.aliases
}


def fetched_toolchains(env: Mapping[str, str]) -> Path:
    """Where ``make toolchains`` puts what no distribution package provides: under the cache."""
    return cache_root(env) / "toolchains"


def lookup(name: str) -> Language | None:
    """The language a Completion names (any alias, case-insensitive), or None."""
    return _BY_ALIAS.get(name.strip().lower())


def discover_toolchains(state_dir: Path, fetched: Path | None = None) -> dict[str, Toolchain]:
    """Toolchains installed on this host, by language name.

    Runs each toolchain's ``--version`` once (trusted host binaries). A language
    whose toolchain is missing is simply absent from the result. ``fetched``:
    the fetched toolchains' directory (default: :func:`fetched_toolchains` of
    this process's environment).
    """
    if fetched is None:
        fetched = fetched_toolchains(os.environ)
    found: dict[str, Toolchain] = {}
    for language in LANGUAGES.values():
        toolchain = language.discover(state_dir, fetched)
        if toolchain is not None:
            found[language.name] = toolchain
    return found
