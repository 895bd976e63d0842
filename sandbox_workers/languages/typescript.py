"""TypeScript: the fetched ``tsc`` type-checks and emits JavaScript, which node runs."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    masked_marker,
    read_only,
    resolve_binary,
)
from sandbox_workers.languages.javascript import JavaScript
from schemas import Limits

__all__ = ["TypeScript"]

ENTRY = "main.js"
# tsc is a node program: V8's reservations (see javascript.py) and a heap of its own.
_TSC_RESERVE_MB = 1024
_TSC_HEAP_MB = 1024
# MultiPL-E's `tsc --target esnext`: not strict, but a type error fails the build (it
# judges a non-zero tsc as a failure). CommonJS, so that `import` compiles to `require`.
# No @types/node here: node's API is `declare var require: any`, as MultiPL-E's tests do.
_TSC_FLAGS = (
    "--target",
    "esnext",
    "--module",
    "commonjs",
    "--noEmitOnError",
    "--skipLibCheck",  # the compiler's own lib.d.ts files: trusted, and a second to check
    "--pretty",
    "false",
    "--newLine",
    "lf",
)

# Loaded with --require before the program (after the blocking stdio), in every run. A
# program shares the assert module with the tests that follow it (one module cache), so
# it could replace `assert.deepEqual` by a function that never throws: the module and its
# strict variant are frozen first. And the tests reach the module through `require`, a
# binding of the module scope that the program may reassign: the main module's `this`
# (its first exports object, which no declaration can shadow) gets a non-writable,
# non-configurable `require` for builtins, which the test prelude puts back.
_GUARD = r"""'use strict';
const Module = require('module');
const builtin = require;
// The modules the tests and the end marker use, as they are now: the program may patch
// Module._load afterwards. A table without a prototype: no lookup the program can patch.
const trusted = Object.create(null);
for (const name of ['assert', 'assert/strict', 'fs']) {
  trusted[name] = trusted[`node:${name}`] = require(name);
}
for (const name of ['assert', 'assert/strict']) {
  const value = trusted[name];
  for (const part of [value, value.AssertionError, value.AssertionError.prototype]) {
    Object.freeze(part);
  }
  for (const key of Object.getOwnPropertyNames(value)) {
    const member = value[key];
    if (typeof member === 'function') Object.freeze(member);
  }
}
const compile = Module.prototype._compile;
let main = true;
Module.prototype._compile = function (content, filename) {
  if (main) {
    main = false;
    Module.prototype._compile = compile;
    Object.defineProperty(this.exports, 'rewardbusRequire', {
      value: (name) => (trusted[name] !== undefined ? trusted[name] : builtin(name)),
    });
  }
  return compile.call(this, content, filename);
};
"""
_GUARD_FILE = "rb_guard.js"

# Put between the program and the tests (one source file). A node program can leave
# through process.exit, process.reallyExit, process.abort, a signal, or swallow the failing
# assert's exception (process.on('uncaughtException')): the end marker (mark_tests_end)
# catches every one. The prelude undoes a reassigned `require` (see _GUARD): an assignment
# to that binding always works (a `const require` of the program's is a SyntaxError).
_PRELUDE = """
// @ts-ignore
require = (this as any).rewardbusRequire;
"""
# The tests' functions are module-scope bindings the program could reassign before they
# run (`test = () => {}` under `// @ts-nocheck`): mark_tests_end puts the tests in a
# namespace, a function scope of their own, whose declarations bind when it runs.
_TESTS_SCOPE = "RewardbusTests"


class TypeScript(Language):
    """TypeScript 5: ``tsc --target esnext``, then the JavaScript run as javascript.py runs it."""

    name = "typescript"
    aliases = frozenset({"typescript", "ts"})
    fence_tags = frozenset({"typescript", "ts", "tsx"})
    extension = "ts"
    test_prelude = _PRELUDE

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir
        node = resolve_binary("node")
        package = fetched / "typescript" / "node_modules" / "typescript"
        tsc = package / "lib" / "tsc.js"
        if node is None or not tsc.is_file():
            return None
        manifest = json.loads((package / "package.json").read_text(encoding="utf-8"))
        return Toolchain(
            language=self.name,
            version=f"typescript-{manifest['version']}",
            paths={"node": str(node), "tsc": str(tsc.resolve())},
            mounts=read_only(node, package),
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(
                toolchain.paths["node"],
                f"--max-old-space-size={_TSC_HEAP_MB}",
                toolchain.paths["tsc"],
                *_TSC_FLAGS,
                source_name,
            ),
            entry=ENTRY,
            collect=(ENTRY,),
            reserve_mb=_TSC_RESERVE_MB,
        )

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # After the last line of the tests (MultiPL-E's `test();` runs them synchronously):
        # any exit or swallowed failure before it leaves the marker out. Built from its mask
        # and key at run time: never a string in main.js for the program to read.
        masked, key = masked_marker(marker)
        tests = tests.removeprefix(self.test_prelude)
        return (
            f"{self.test_prelude}namespace {_TESTS_SCOPE} {{\n{tests}\n}}\n"
            f"(this as any).rewardbusRequire('fs').writeSync(2, new Uint8Array("
            f"[{byte_list(masked)}].map((byte, i) => byte ^ [{byte_list(key)}][i])));\n"
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        javascript = JavaScript().launch(toolchain, entry, limits)
        return Launch(
            argv=(
                *javascript.argv[:-1],
                "--require",
                f"./{_GUARD_FILE}",
                entry,
            ),
            files={**javascript.files, _GUARD_FILE: _GUARD.encode()},
            memory_overhead_mb=javascript.memory_overhead_mb,
            reserve_mb=javascript.reserve_mb,
        )
