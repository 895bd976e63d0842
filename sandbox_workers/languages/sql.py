"""SQL on SQLite: the program is a query, each test input a schema/data script."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    probe_version,
    read_only,
    resolve_binary,
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

    def discover(self, state_dir: Path) -> Toolchain | None:
        del state_dir
        sqlite3 = resolve_binary("sqlite3")
        if sqlite3 is None:
            return None
        version = probe_version([str(sqlite3), "--version"])
        if version is None:
            return None
        return Toolchain(
            language=self.name,
            version=f"sqlite-{version.split()[0]}",
            paths={"sqlite3": str(sqlite3)},
            mounts=read_only(sqlite3),
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
