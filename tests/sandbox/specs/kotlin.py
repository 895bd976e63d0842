"""Kotlin: MultiPL-E's tests are a `fun main()` of `assert(...)` after the program."""

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_WRONG_ADD = "fun add(a: Int, b: Int): Int = a * b\n"

SPEC = LanguageSpec(
    language="kotlin",
    compiled=True,
    programs={
        Verdict.ACCEPTED: "fun main() {\n"
        '    val (a, b) = readLine()!!.trim().split(Regex("\\\\s+")).map { it.toLong() }\n'
        "    println(a + b)\n}\n",
        Verdict.WRONG_ANSWER: "fun main() { println(0) }\n",
        Verdict.RUNTIME_ERROR: 'fun main() { throw IllegalStateException("boom") }\n',
        Verdict.TIME_LIMIT: "fun main() { var x = 0L; while (true) { x++ } }\n",
        Verdict.MEMORY_LIMIT: "fun main() {\n    val keep = ArrayList<LongArray>()\n"
        "    while (true) keep.add(LongArray(1 shl 20))\n}\n",
        Verdict.OUTPUT_LIMIT: 'fun main() { while (true) println("x".repeat(1000)) }\n',
        Verdict.COMPILE_ERROR: 'fun main() { val x: Int = "a" }\n',
    },
    assert_tests="fun main() {\n    var candidate = ::add\n"
    "    assert(candidate(2, 3) == 5)\n    assert(candidate(-1, 1) == 0)\n}\n",
    assert_good="fun add(a: Int, b: Int): Int = a + b\n",
    assert_bad=_WRONG_ADD,
    exit_hacks={
        "exit-in-add": "fun add(a: Int, b: Int): Int { System.exit(0); return 0 }\n",
        "halt-in-add": "fun add(a: Int, b: Int): Int { Runtime.getRuntime().halt(0); return 0 }\n",
        # A top-level property: initialised when MainKt loads, before any main runs.
        "exitProcess-at-load": "val gone: Int = kotlin.system.exitProcess(0)\n"
        "fun add(a: Int, b: Int): Int = 0\n",
        "exit-from-a-thread": "fun add(a: Int, b: Int): Int {\n"
        "    Thread { System.exit(0) }.start()\n    Thread.sleep(10_000)\n    return 0\n}\n",
        # The failed assert ends the JVM with status 1; its shutdown hook makes that 0.
        "halt-0-in-a-shutdown-hook": "val hook = Runtime.getRuntime()"
        ".addShutdownHook(Thread { Runtime.getRuntime().halt(0) })\n" + _WRONG_ADD,
        "halt-0-on-an-uncaught-exception": "val handler = Thread.setDefaultUncaughtExceptionHandler"
        " { _, _ -> Runtime.getRuntime().halt(0) }\n" + _WRONG_ADD,
    },
    disable_hacks={
        # A file's own function outranks kotlin.assert (a default import).
        "own-assert": "fun assert(value: Boolean) {}\n" + _WRONG_ADD,
        # An explicit import outranks even the file's own functions.
        "assert-import-alias": "import kotlin.io.println as assert\n" + _WRONG_ADD,
        # kotlin.assert checks only while kotlin._Assertions.ENABLED, read once, when that
        # class loads (after the program's top-level properties are initialised).
        "assertions-off-for-kotlin": "val off = ClassLoader.getSystemClassLoader()"
        '.setClassAssertionStatus("kotlin._Assertions", false)\n' + _WRONG_ADD,
        "assertions-off-by-default": "val off = ClassLoader.getSystemClassLoader()"
        ".setDefaultAssertionStatus(false)\n" + _WRONG_ADD,
    },
    checker="import java.io.File\nimport kotlin.system.exitProcess\n\n"
    "fun main(args: Array<String>) {\n"
    "    val (n, output, answer) = args.map { File(it).readText().trim().toLongOrNull() }\n"
    "    val ok = n != null && output != null && answer != null"
    " && Math.floorMod(output - answer, n) == 0L\n"
    "    exitProcess(if (ok) 0 else 1)\n}\n",
)
