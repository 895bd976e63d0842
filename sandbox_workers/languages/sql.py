"""SQL on SQLite: the program is a query, each test input a schema/data script."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    discover_binary,
    utf8,
)
from schemas import Limits

__all__ = ["SCHEMA_FILE", "Sql"]

# The test's input is written to this file and loaded before the query runs.
SCHEMA_FILE = "schema.sql"


class Sql(Language):
    """``sqlite3 -safe -init schema.sql :memory:`` with the query on stdin.

    ``-safe`` disables the dot-commands that reach outside the database
    (``.shell``, ``.system``, ``.read``, ``.open``...) for the query; the schema
    script (trusted test data) is loaded by ``-init`` before it.
    """

    name = "sql"
    aliases = frozenset({"sql", "sqlite", "sqlite3"})
    fence_tags = frozenset({"sql", "sqlite", "sqlite3"})
    extension = "sql"
    output_kind = "rows"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        return discover_binary(
            self.name, "sqlite3", ["--version"], version=lambda v: f"sqlite-{v.split()[0]}"
        )

    def test_io(self, source: str, test_input: str) -> tuple[bytes, Mapping[str, bytes]]:
        return utf8(source), {SCHEMA_FILE: utf8(test_input)}

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del entry, limits
        return Launch(
            argv=(
                toolchain.paths["sqlite3"],
                "-safe",
                "-batch",
                "-bail",
                "-list",
                "-noheader",
                "-init",
                SCHEMA_FILE,
                ":memory:",
            )
        )
