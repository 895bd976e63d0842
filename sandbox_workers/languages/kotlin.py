"""Kotlin/JVM: the fetched compiler jars run by the host's JDK, programs on its ``java``."""

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
)
from sandbox_workers.languages.jvm import (
    COMPILER_RESERVE_MB,
    JAR,
    compiler_flags,
    discover_jvm_toolchain,
    jar_launch,
)
from schemas import Limits

__all__ = ["Kotlin"]

_SOURCE = "main.kt"
# A file's top-level functions compile into the class <File>Kt (main.kt: MainKt), unless a
# package or an @file:JvmName annotation moves or renames it: both are blanked out.
_MAIN_CLASS = "MainKt"
_PACKAGE = re.compile(r"^[ \t]*package\s+[\w.`]+[ \t]*;?", re.M)
_JVM_NAME = re.compile(r"@file\s*:\s*JvmName\s*\(\s*\"[^\"\n]*\"\s*\)")
# The tests' `fun main()` or `fun main(args: Array<String>)`.
_TESTS_MAIN = re.compile(r"\bfun\s+main\s*\(\s*(\w+\s*:\s*Array\s*<\s*String\s*>)?\s*\)")
_RENAMED_MAIN = "rewardbusTestsMain"
# The tests' `assert(...)`, bound where no name of the program's can reach: a parameter of
# their renamed main. A local name comes before every other scope in Kotlin, so neither a
# program's own `fun assert`, nor an import alias (`import kotlin.io.println as assert`,
# which outranks a file's own functions), nor a class named `kotlin` (which outranks the
# package in `kotlin.assert`) can stand in for it. It checks whether or not -ea is on:
# kotlin.assert reads kotlin._Assertions.ENABLED, which a program can turn off before it
# is loaded (ClassLoader.setClassAssertionStatus).
_ASSERT_PARAMETER = "assert: (Boolean) -> Unit"
_ASSERT = '{ value -> if (!value) throw AssertionError("Assertion failed") }'
# What the CDS archives are trained on: a compile of this, and a run (stdin "1 2").
_TRAINING = """fun main() {
    val numbers = (readLine() ?: "").trim().split(Regex("\\\\s+")).map { it.toLong() }
    val counts = HashMap<Long, Int>()
    numbers.forEach { counts[it] = (counts[it] ?: 0) + 1 }
    val text = numbers.sorted().joinToString(",")
    println(numbers.sum() + counts.size + text.length + listOf(1, 2).map { it * 2 }.sum())
}
"""


class Kotlin(Language):
    """Kotlin: ``kotlinc`` (K2JVMCompiler) to a jar, run with the standard library."""

    name = "kotlin"
    # kotlin_script: SandboxFusion's tag (verl's sandbox client) for Kotlin.
    aliases = frozenset({"kotlin", "kt", "kotlin_script"})
    fence_tags = frozenset({"kotlin", "kt"})
    extension = "kt"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        return discover_jvm_toolchain(
            self,
            state_dir,
            fetched / "kotlin" / "lib",
            "kotlin-stdlib",
            ("kotlin-stdlib", "kotlin-compiler-embeddable"),
            training=_TRAINING,
        )

    def prepare_source(self, source: str) -> str:
        return _JVM_NAME.sub(_blank, _PACKAGE.sub(_blank, source))

    def source_name(self, source: str) -> str:
        del source
        return _SOURCE

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # System.exit, Runtime.halt and exitProcess end the JVM before the asserts ran; a
        # shutdown hook or an uncaught-exception handler can halt(0) after one failed. The
        # tests' main becomes a function that our main calls, then prints the marker (built
        # from its mask and key at run time: no constant in the class file); any exit before
        # that leaves it out. Test code without a main of its own is left alone.
        found = _TESTS_MAIN.findall(tests)
        if len(found) != 1:
            return None
        args = found[0]  # the tests' own `args: Array<String>`, or ""
        header = f"fun {_RENAMED_MAIN}({_ASSERT_PARAMETER}{', ' + args if args else ''})"
        renamed = _TESTS_MAIN.sub(lambda _: header, tests)
        masked, key = masked_marker(marker)
        call = f"{_RENAMED_MAIN}({_ASSERT}{', rewardbusArgs' if args else ''})"
        return (
            f"{renamed}\n"
            "fun main(rewardbusArgs: Array<String>) {\n"
            f"    {call}\n"
            f"    val rewardbusText = byteArrayOf({byte_list(masked, signed=True)})\n"
            f"    val rewardbusKey = byteArrayOf({byte_list(key, signed=True)})\n"
            "    for (i in rewardbusText.indices) {\n"
            "        rewardbusText[i] = (rewardbusText[i].toInt() xor rewardbusKey[i].toInt())"
            ".toByte()\n    }\n"
            "    System.err.print(String(rewardbusText, Charsets.UTF_8))\n"
            "    System.err.flush()\n}\n"
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(
                toolchain.paths["java"],
                *compiler_flags(toolchain),
                "-cp",
                toolchain.paths["lib-jars"],  # in a fixed order: the CDS archive's classpath
                "org.jetbrains.kotlin.cli.jvm.K2JVMCompiler",
                "-no-stdlib",
                "-no-reflect",
                "-classpath",
                toolchain.paths["kotlin-stdlib"],
                "-nowarn",
                "-d",
                JAR,
                source_name,
            ),
            entry=_MAIN_CLASS,
            collect=(JAR,),
            reserve_mb=COMPILER_RESERVE_MB,
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        return jar_launch(toolchain, "kotlin-stdlib", entry, limits)


def _blank(match: re.Match[str]) -> str:
    """Spaces as long as the match: the compiler's line and column numbers stay right."""
    return " " * len(match.group(0))
