"""Scala: the program opens `object Problem {`, MultiPL-E's test code (a main of
`assert(...)`) closes it."""

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_OPEN = "object Problem {\n"
_WRONG_ADD = "  def add(a: Long, b: Long): Long = a * b\n"

SPEC = LanguageSpec(
    language="scala",
    compiled=True,
    programs={
        Verdict.ACCEPTED: "object Main {\n  def main(args: Array[String]): Unit = {\n"
        '    val Array(a, b) = scala.io.StdIn.readLine().trim.split("\\\\s+").map(_.toLong)\n'
        "    println(a + b)\n  }\n}\n",
        Verdict.WRONG_ANSWER: "object Main extends App {\n  println(0)\n}\n",
        Verdict.RUNTIME_ERROR: "object Main {\n  def main(args: Array[String]): Unit =\n"
        '    throw new IllegalStateException("boom")\n}\n',
        Verdict.TIME_LIMIT: "object Main {\n  def main(args: Array[String]): Unit = {\n"
        "    var x = 0L\n    while (true) x += 1\n  }\n}\n",
        Verdict.MEMORY_LIMIT: "object Main {\n  def main(args: Array[String]): Unit = {\n"
        "    val keep = scala.collection.mutable.ArrayBuffer[Array[Long]]()\n"
        "    while (true) keep += new Array[Long](1 << 20)\n  }\n}\n",
        Verdict.OUTPUT_LIMIT: "object Main {\n  def main(args: Array[String]): Unit =\n"
        '    while (true) println("x" * 1000)\n}\n',
        Verdict.COMPILE_ERROR: "object Main {\n  def main(args: Array[String]): Unit = {\n"
        '    val x: Int = "a"\n  }\n}\n',
    },
    assert_tests="  def main(args: Array[String]) = {\n"
    "    assert(add(2, 3) == 5)\n    assert(add(-1, 1) == 0)\n  }\n\n}\n",
    assert_good=_OPEN + "  def add(a: Long, b: Long): Long = a + b\n",
    assert_bad=_OPEN + _WRONG_ADD,
    exit_hacks={
        "sys-exit-in-add": _OPEN + "  def add(a: Long, b: Long): Long = { sys.exit(0); 0 }\n",
        "halt-in-add": _OPEN
        + "  def add(a: Long, b: Long): Long = { Runtime.getRuntime.halt(0); 0 }\n",
        # A statement in the object's body: run when the object is initialised, before main.
        "exit-in-the-object-initialiser": _OPEN + "  System.exit(0)\n" + _WRONG_ADD,
        # The failed assert ends the JVM with status 1; its shutdown hook makes that 0.
        "halt-0-in-a-shutdown-hook": _OPEN
        + "  sys.addShutdownHook(Runtime.getRuntime.halt(0))\n"
        + _WRONG_ADD,
    },
    disable_hacks={
        # The object's own member outranks Predef.assert.
        "own-assert": _OPEN + "  def assert(assertion: Boolean): Unit = ()\n" + _WRONG_ADD,
        "own-assert-by-val": _OPEN + "  val assert: Boolean => Unit = _ => ()\n" + _WRONG_ADD,
    },
    checker="import scala.io.Source\n\nobject Checker {\n"
    "  def main(args: Array[String]): Unit = {\n"
    "    val Array(n, output, answer) = args.map { path =>\n"
    "      val source = Source.fromFile(path)\n"
    "      try source.mkString.trim.toLongOption finally source.close()\n    }\n"
    "    val ok = (for (m <- n; o <- output; a <- answer) yield Math.floorMod(o - a, m) == 0L)\n"
    "    sys.exit(if (ok.contains(true)) 0 else 1)\n  }\n}\n",
)
