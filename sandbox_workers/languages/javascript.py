"""JavaScript on Node.js."""

from __future__ import annotations

from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    probe_version,
    read_only,
    resolve_binary,
)
from schemas import Limits

__all__ = ["JavaScript"]

# V8's own isolate, code space and node's bootstrap, outside the program's heap.
_NODE_OVERHEAD_MB = 128
# V8 reserves its code range and heap cage up front (measured: node 20 with a
# 128 MB heap does not start under RLIMIT_AS = heap + 512 MB, does at + 768 MB).
_NODE_RESERVE_MB = 1024


class JavaScript(Language):
    """Node.js, with V8's old-space heap capped at the memory limit."""

    name = "javascript"
    aliases = frozenset({"javascript", "js", "node", "nodejs"})
    fence_tags = frozenset({"javascript", "js", "node", "nodejs", "jsx", "mjs"})
    extension = "js"

    def discover(self, state_dir: Path) -> Toolchain | None:
        del state_dir
        node = resolve_binary("node")
        if node is None:
            return None
        version = probe_version([str(node), "--version"], prefix="node-")
        if version is None:
            return None
        return Toolchain(
            language=self.name,
            version=version,
            paths={"node": str(node)},
            mounts=read_only(node),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        return Launch(
            argv=(toolchain.paths["node"], f"--max-old-space-size={limits.memory_mb}", entry),
            memory_overhead_mb=_NODE_OVERHEAD_MB,
            reserve_mb=_NODE_RESERVE_MB,
        )
