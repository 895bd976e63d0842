"""TypeScript: tsc then node; MultiPL-E's tests `require('node:assert')` through `declare var`."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

# No @types/node in the toolchain: node's API is declared `any`, as MultiPL-E's tests do.
_NODE = "declare var require: any;\ndeclare var process: any;\n"
_READ = "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
_WRONG_ADD = "function add(a: number, b: number): number {\n  return a * b;\n}\n"

SPEC = LanguageSpec(
    language="typescript",
    compiled=True,
    programs={
        Verdict.ACCEPTED: f"{_NODE}{_READ}console.log(a + b);\n",
        Verdict.WRONG_ANSWER: f"{_NODE}{_READ}console.log(a - b);\n",
        Verdict.RUNTIME_ERROR: "throw new Error('boom');\n",
        Verdict.TIME_LIMIT: "while (true) {}\n",
        Verdict.MEMORY_LIMIT: "const keep: number[][] = [];\n"
        "while (true) keep.push(new Array(1 << 20).fill(7));\n",
        Verdict.OUTPUT_LIMIT: "while (true) console.log('x'.repeat(1000));\n",
        # A type error: tsc fails the build (MultiPL-E judges a failing tsc the same way).
        Verdict.COMPILE_ERROR: "const n: number = 'five';\nconsole.log(n);\n",
    },
    assert_tests="declare var require: any;\n"
    "const assert = require('node:assert');\n"
    "function test() {\n"
    "  let candidate = add;\n"
    "  assert.deepEqual(candidate(2, 3), 5);\n"
    "  assert.deepEqual(candidate(-1, 1), 0);\n"
    "}\n\n"
    "test();\n",
    assert_good="function add(a: number, b: number): number {\n  return a + b;\n}\n",
    assert_bad=_WRONG_ADD,
    exit_hacks={
        "exit-in-add": f"{_NODE}function add(a: number, b: number): number {{\n"
        "  process.exit(0);\n  return 0;\n}\n",
        "exit-at-load": f"{_NODE}process.exit(0);\n{_WRONG_ADD}",
        "really-exit": f"{_NODE}function add(a: number, b: number): number {{\n"
        "  process.reallyExit(0);\n  return 0;\n}\n",
        "exit-in-exit-event": f"{_NODE}process.on('exit', () => process.exit(0));\n{_WRONG_ADD}",
        # The failing assert's exception, swallowed: node then exits 0.
        "swallow-uncaught": f"{_NODE}process.on('uncaughtException', () => {{}});\n{_WRONG_ADD}",
    },
    disable_hacks={
        # The assert module is shared with the tests (one module cache).
        "patch-assert": f"{_NODE}require('assert').deepEqual = () => {{}};\n{_WRONG_ADD}",
        "replace-require": f"{_NODE}require = () => ({{ deepEqual() {{}} }});\n{_WRONG_ADD}",
        "function-require": "// @ts-nocheck\n"
        "function require(name) {\n  return { deepEqual() {} };\n}\n" + _WRONG_ADD,
        "patch-module-load": f"{_NODE}const Module = require('module');\n"
        "const load = Module._load;\n"
        "Module._load = function (request: string, ...rest: any[]) {\n"
        "  if (request.includes('assert')) return { deepEqual() {} };\n"
        "  return load.call(this, request, ...rest);\n"
        "};\n" + _WRONG_ADD,
        # The tests' own function, reassigned before it runs (tsc refuses this unless told
        # not to check).
        "replace-test": f"// @ts-nocheck\n{_WRONG_ADD}test = () => {{}};\n",
    },
    checker=f"{_NODE}const fs = require('fs');\n"
    "const [input, output, answer] = process.argv.slice(2)"
    ".map((name: string) => fs.readFileSync(name, 'utf8').trim());\n"
    "const n = Number(input);\n"
    "process.exit((Number(output) - Number(answer)) % n === 0 ? 0 : 1);\n",
)
