"""JavaScript on Node.js."""

from __future__ import annotations

from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    discover_binary,
)
from schemas import Limits

__all__ = ["BLOCKING_STDIO", "JavaScript"]

# V8's own isolate, code space and node's bootstrap, outside the program's heap.
_NODE_OVERHEAD_MB = 128
# V8 reserves its code range and heap cage up front (measured: node 20 with a
# 128 MB heap does not start under RLIMIT_AS = heap + 512 MB, does at + 768 MB).
_NODE_RESERVE_MB = 1024


# Node makes stdout/stderr pipes non-blocking and queues a write the full pipe
# refuses, so `while (true) console.log(x)` stops at the pipe's 64 KB, never
# reaches the output limit and times out instead (observed in about 1 run in
# 5). Writing synchronously restores back-pressure: the program blocks on the
# pipe, and the sandbox sees every byte. Loaded with --require before the
# program, while process.stdout has not been created yet.
BLOCKING_STDIO = r"""'use strict';
const fs = require('fs');
const { Writable } = require('stream');
function writeAll(fd, data) {
  let offset = 0;
  while (offset < data.length) {
    try {
      offset += fs.writeSync(fd, data, offset, data.length - offset);
    } catch (error) {
      if (error.code !== 'EAGAIN') throw error;
    }
  }
}
function blocking(fd) {
  const stream = new Writable({
    write(chunk, encoding, callback) {
      try {
        writeAll(fd, chunk);
      } catch (error) {
        callback(error);
        return;
      }
      callback();
    },
  });
  stream.fd = fd;
  stream.isTTY = false;
  return stream;
}
for (const [name, fd] of [['stdout', 1], ['stderr', 2]]) {
  const stream = blocking(fd);
  Object.defineProperty(process, name, { configurable: true, enumerable: true, get: () => stream });
}
"""
_STDIO_FILE = "rb_stdio.js"


class JavaScript(Language):
    """Node.js, with V8's old-space heap capped at the memory limit."""

    name = "javascript"
    aliases = frozenset({"javascript", "js", "node", "nodejs"})
    fence_tags = frozenset({"javascript", "js", "node", "nodejs", "jsx", "mjs"})
    extension = "js"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        return discover_binary(self.name, "node", ["--version"], version=lambda v: f"node-{v}")

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        return Launch(
            argv=(
                toolchain.paths["node"],
                f"--max-old-space-size={limits.memory_mb}",
                "--require",
                f"./{_STDIO_FILE}",
                entry,
            ),
            files={_STDIO_FILE: BLOCKING_STDIO.encode()},
            memory_overhead_mb=_NODE_OVERHEAD_MB,
            reserve_mb=_NODE_RESERVE_MB,
        )
