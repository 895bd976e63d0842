"""Scala 2.13: the fetched compiler jars run by the host's JDK, programs on its ``java``.

An assert suite has MultiPL-E's shape: the program opens an object (``object Problem {``
and its ``def``s) and the test code closes it (``def main(args: Array[String]) = {
assert(...) }`` then ``}``), so the tests call the program's methods by their plain names.
"""

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

__all__ = ["Scala", "main_object"]

_PACKAGE = re.compile(r"^[ \t]*package\s+[\w.`]+[ \t]*;?[ \t]*$", re.M)
_MAIN_METHOD = re.compile(r"\bdef\s+main\s*\(")
_APP_OBJECT = re.compile(r"\bobject\s+([A-Za-z_$][\w$]*)\s+extends\s+App\b")
_ANY_OBJECT = re.compile(r"\bobject\s+([A-Za-z_$][\w$]*)")
# The tests' `def main(args: Array[String])`.
_TESTS_MAIN = re.compile(r"\bdef\s+main\s*\(\s*(\w+)\s*:\s*Array\s*\[\s*String\s*\]\s*\)")
_RENAMED_MAIN = "rewardbusTestsMain"
_COMPILER_JARS = ("scala-compiler", "scala-reflect", "scala-library")
# What the CDS archives are trained on: a compile of this, and a run (stdin "1 2").
_TRAINING = """object RewardbusCdsTraining {
  def main(args: Array[String]): Unit = {
    val numbers = scala.io.StdIn.readLine().trim.split("\\\\s+").map(_.toLong).toList
    val counts = scala.collection.mutable.Map[Long, Int]()
    numbers.foreach(n => counts(n) = counts.getOrElse(n, 0) + 1)
    val text = numbers.sorted.mkString(",")
    println(numbers.sum + counts.size + text.length + Vector(1, 2).map(_ * 2).sum)
    assert(numbers.nonEmpty, "no numbers")
  }
}
"""
# The tests' `assert(...)` is a parameter of their renamed main: a local name, which comes
# before the object's members (a program's own `def assert`) and Predef's assert. Its class
# is declared next to it, inside the object (a program's class of that name clashes: a
# compile error). Names outside are reached from _root_, which nothing can shadow.
_ASSERT_CLASS = "RewardbusAssert"
_ASSERT = (
    f"final class {_ASSERT_CLASS} {{\n"
    "  def apply(assertion: Boolean): Unit =\n"
    '    if (!assertion) throw new _root_.java.lang.AssertionError("assertion failed")\n'
    "  def apply(assertion: Boolean, message: => Any): Unit =\n"
    "    if (!assertion)\n"
    '      throw new _root_.java.lang.AssertionError("assertion failed: " + message)\n'
    "}\n"
)


def main_object(source: str) -> str:
    """The object to run: the innermost one around the first ``def main``, else the one
    extending ``App``, else ``Main``.

    Around it means its braces are still open there (counted naively: a brace in a string
    or comment between the two can mislead it), so an object the program declares inside
    ``object Problem`` before the tests' main is not taken for it.
    """
    main = _MAIN_METHOD.search(source)
    if main:
        for declared in reversed(list(_ANY_OBJECT.finditer(source[: main.start()]))):
            if _still_open(source[declared.end() : main.start()]):
                return declared.group(1)
    app = _APP_OBJECT.search(source)
    return app.group(1) if app else "Main"


def _still_open(text: str) -> bool:
    """Whether the first brace in ``text`` opens a block that ``text`` does not close."""
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth <= 0:
                return False
    return depth > 0


class Scala(Language):
    """Scala 2: ``scalac`` to a jar, run with the Scala library; the object with ``main``."""

    name = "scala"
    aliases = frozenset({"scala", "scala2", "scala-2"})
    fence_tags = frozenset({"scala", "sc"})
    extension = "scala"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        return discover_jvm_toolchain(
            self,
            state_dir,
            fetched / "scala" / "lib",
            "scala-library",
            ("scala-library", "scala-compiler", "scala-reflect"),
            training=_TRAINING,
        )

    def prepare_source(self, source: str) -> str:
        # A `package a.b` line puts the object in a/b/: blank it out (same length, same lines).
        return _PACKAGE.sub(lambda match: " " * len(match.group(0)), source)

    def source_name(self, source: str) -> str:
        # scalac takes any file name: this one carries the object to run to compile_step.
        return f"{main_object(source)}.scala"

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        # sys.exit, System.exit and Runtime.halt end the JVM before the asserts ran (from a
        # method, or the object's own initialiser); a shutdown hook can halt(0) after one
        # failed. The tests' main becomes a method that a main of ours, declared just before
        # it in the same object, calls and then prints the marker (built from its mask and
        # key at run time: no constant in the class file). Test code without a main of its
        # own is left alone.
        if len(_TESTS_MAIN.findall(tests)) != 1:
            return None
        masked, key = masked_marker(marker)
        ours = (
            f"{_ASSERT}"
            "def main(rewardbusArgs: Array[String]): Unit = {\n"
            f"  {_RENAMED_MAIN}(new {_ASSERT_CLASS}, rewardbusArgs)\n"
            f"  val rewardbusText = Array[Byte]({byte_list(masked, signed=True)})\n"
            f"  val rewardbusKey = Array[Byte]({byte_list(key, signed=True)})\n"
            "  for (i <- rewardbusText.indices)"
            " rewardbusText(i) = (rewardbusText(i) ^ rewardbusKey(i)).toByte\n"
            '  _root_.java.lang.System.err.print(new String(rewardbusText, "UTF-8"))\n'
            "  _root_.java.lang.System.err.flush()\n}\n"
        )
        renamed = f"def {_RENAMED_MAIN}(assert: {_ASSERT_CLASS}, " + "{}: Array[String])"
        return _TESTS_MAIN.sub(lambda m: ours + renamed.format(m.group(1)), tests)

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        return CompileStep(
            argv=(
                toolchain.paths["java"],
                *compiler_flags(toolchain),
                "-cp",
                ":".join(toolchain.paths[jar] for jar in _COMPILER_JARS),
                "scala.tools.nsc.Main",
                "-classpath",
                toolchain.paths["scala-library"],
                "-nowarn",
                "-d",
                JAR,
                source_name,
            ),
            entry=source_name.removesuffix(".scala"),
            collect=(JAR,),
            reserve_mb=COMPILER_RESERVE_MB,
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        return jar_launch(toolchain, "scala-library", entry, limits)
