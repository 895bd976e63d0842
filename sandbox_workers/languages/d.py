"""D with LDC (the LLVM D compiler), linked against the shared Phobos and druntime."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
)
from schemas import Limits

__all__ = ["D"]

BINARY = "main"
# ldc2 reads its default switches (Phobos, druntime, import paths) from here; the jail
# shows /usr but not /etc.
_LDC_CONFIG = Path("/etc/ldc2.conf")
# MultiPL-E's D tests: `unittest { alias candidate = f; assert(...); }` then `void main(){}`.
_UNITTEST = re.compile(r"\bunittest\s*\{")
_TESTS_MAIN = re.compile(r"\bvoid\s+main\s*\(\s*\)\s*")
_EMPTY_MAIN = re.compile(r"\bvoid\s+main\s*\(\s*\)\s*\{\s*\}")
# An assert of the tests; `static assert` (checked by the compiler) stays.
_ASSERT = re.compile(r"(\bstatic\s+)?\bassert\s*\(")
_RENAMED_MAIN = "rewardbusTestsMain"
_CHECKS = "RewardbusChecks"
# What the tests' asserts become. D's assert calls core.exception's assert handler, which a
# program may replace with one that returns (`assertHandler = (file, line, msg) {}`): every
# later assert would pass. Our check says so on stderr ("Assertion": a wrong answer) and
# aborts; it is a member of a struct of ours (a module-level name: the program cannot
# declare it too, nor add an overload to it).
_CHECKS_STRUCT = f"""
struct {_CHECKS} {{
    static void check(T)(T condition, lazy string message = null,
                         string file = __FILE__, size_t line = __LINE__) {{
        if (condition) return;
        // Imported here: a module-level name of the program's cannot stand in for these.
        static import core.stdc.stdlib;
        static import core.sys.posix.unistd;
        static import std.conv;
        string text = "\\nAssertion failure at " ~ file ~ "(" ~ std.conv.to!string(line) ~ ")"
            ~ (message is null ? "" : ": " ~ message) ~ "\\n";
        core.sys.posix.unistd.write(2, text.ptr, text.length);
        core.stdc.stdlib.abort();
    }}
}}
"""


class D(Language):
    """D (LDC, unoptimised: a compile takes a quarter of -O's time; asserts stay on)."""

    name = "d"
    # d_ut: SandboxFusion's tag (verl's sandbox client) for D with unittest blocks.
    aliases = frozenset({"d", "dlang", "ldc", "ldc2", "d_ut"})
    fence_tags = frozenset({"d", "dlang"})
    extension = "d"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        ldc2 = resolve_binary("ldc2")
        if ldc2 is None or not _LDC_CONFIG.is_file():
            return None
        banner = probe_version([str(ldc2), "--version"])
        if banner is None:
            return None
        # The linker driver (cc), Phobos' headers and libraries live under /usr.
        return Toolchain(
            language=self.name,
            version=_ldc_version(banner),
            paths={"ldc2": str(ldc2)},
            mounts=read_only(ldc2, _LDC_CONFIG),
        )

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # exit(0) (libc's, by core.stdc.stdlib), _exit, a module constructor that exits, an
        # exec: all end the process with status 0 before the tests ran. The tests are not
        # left to druntime's unittest runner, which a program can switch off
        # (`Runtime.moduleUnitTester = () => true;` in a module constructor): each unittest
        # block becomes a function that a main of ours calls, in order, then the tests' own
        # main if it has a body, and only then prints the marker (built at run time from its
        # mask and key). The program is compiled without -unittest, so a unittest block
        # left alone would never run: test code with unittest blocks and no main gets ours
        # (a program with a main of its own then does not compile: never a false pass).
        # Test code with neither, or with more than one main, is left alone.
        mains = len(_TESTS_MAIN.findall(tests))
        if mains > 1 or not (mains or _UNITTEST.search(tests)):
            return None
        masked, key = masked_marker(marker)
        count = 0

        def function(match: re.Match[str]) -> str:
            nonlocal count
            count += 1
            return f"void rewardbusUnittest{count}() {{"

        checked = _ASSERT.sub(
            lambda m: m.group(0) if m.group(1) else f"{_CHECKS}.check(",
            _UNITTEST.sub(function, tests),
        )
        calls = "".join(f" rewardbusUnittest{i}();" for i in range(1, count + 1))
        if _EMPTY_MAIN.search(checked):
            checked = _EMPTY_MAIN.sub("", checked)
        elif mains:
            checked = _TESTS_MAIN.sub(f"void {_RENAMED_MAIN}() ", checked)
            calls += f" {_RENAMED_MAIN}();"
        ours = (
            f"void main() {{{calls}\n"
            f"    static immutable ubyte[{len(masked)}] masked = [{byte_list(masked)}];\n"
            # Not immutable: the compiler must not fold the two into the marker as text.
            f"    __gshared ubyte[{len(key)}] key = [{byte_list(key)}];\n"
            f"    ubyte[{len(masked)}] text;\n"
            "    foreach (i, b; masked) text[i] = b ^ key[i];\n"
            "    static import core.sys.posix.unistd;\n"
            "    core.sys.posix.unistd.write(2, text.ptr, text.length);\n"
            "}\n"
        )
        return f"{checked}\n{_CHECKS_STRUCT}\n{ours}"

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(toolchain.paths["ldc2"], f"-of={BINARY}", source_name),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain, limits
        return Launch(argv=(f"./{entry}",))


def _ldc_version(banner: str) -> str:
    match = re.search(r"\((\d+(?:\.\d+)+)\)", banner)
    return f"ldc-{match.group(1)}" if match else banner
