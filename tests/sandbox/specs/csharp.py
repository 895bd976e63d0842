"""C# on Mono, in MultiPL-E's shape: the program opens ``class Problem``, the tests close it."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_HEAD = (
    "using System;\nusing System.Numerics;\nusing System.Diagnostics;\n"
    "using System.Collections.Generic;\nusing System.Linq;\nusing System.Text;\n"
)


def _program(body: str, *, head: str = "", types: str = "", members: str = "") -> str:
    """A MultiPL-E completion: ``head``, the usings, ``types``, the opened class with ``Add``
    (and ``members``)."""
    return (
        f"{head}{_HEAD}{types}class Problem {{\n{members}"
        f"    public static long Add(long a, long b) {{\n{body}\n    }}\n"
    )


_WRONG = "        return a * b;"

_ASSERT_TESTS = """    public static void Main(string[] args) {
    Debug.Assert(Add((2L), (3L)) == (5L));
    Debug.Assert(Add((-1L), (1L)) == (0L));
    }

}
"""

_PROGRAMS = {
    Verdict.ACCEPTED: "using System;\nclass Solution { static void Main() {"
    " var p = Console.ReadLine().Split(' ');"
    " Console.WriteLine(long.Parse(p[0]) + long.Parse(p[1])); } }\n",
    Verdict.WRONG_ANSWER: "class Solution { static void Main() {"
    " System.Console.WriteLine(0); } }\n",
    Verdict.RUNTIME_ERROR: "class Solution { static void Main() {"
    ' throw new System.Exception("boom"); } }\n',
    Verdict.TIME_LIMIT: "class Solution { static void Main() { long x = 0; while (true) x++; } }\n",
    Verdict.MEMORY_LIMIT: "using System.Collections.Generic;\nclass Solution { static void Main() {"
    " var keep = new List<long[]>(); while (true) keep.Add(new long[1 << 20]); } }\n",
    Verdict.OUTPUT_LIMIT: "class Solution { static void Main() {"
    ' while (true) System.Console.WriteLine("xxxxxxxxxxxxxxxxxxxxxxxx"); } }\n',
    Verdict.COMPILE_ERROR: "class Solution { static void Main() { int x = } }\n",
}

_LIBC = (
    '    [System.Runtime.InteropServices.DllImport("libc")]'
    " static extern {returns} {name}({parameters});\n"
)

_EXIT_HACKS = {
    "environment-exit-in-add": _program("        Environment.Exit(0);\n        return 0;"),
    "environment-exit-in-static-constructor": _program(
        _WRONG, members="    static Problem() { Environment.Exit(0); }\n"
    ),
    "environment-exit-from-a-thread": _program(
        "        var t = new System.Threading.Thread(() => Environment.Exit(0));\n"
        "        t.Start(); t.Join();\n        return 0;"
    ),
    "environment-failfast": _program('        Environment.FailFast("bye");\n        return 0;'),
    "libc-exit": _program(
        "        exit(0);\n        return 0;",
        members=_LIBC.format(returns="void", name="exit", parameters="int status"),
    ),
    "libc-_exit": _program(
        "        _exit(0);\n        return 0;",
        members=_LIBC.format(returns="void", name="_exit", parameters="int status"),
    ),
    "libc-execv": _program(
        '        execv("/bin/true", new string[] { "true", null });\n        return 0;',
        members=_LIBC.format(returns="int", name="execv", parameters="string path, string[] argv"),
    ),
    # The tests' Main (renamed) is a method of Problem like any other.
    "call-the-tests-main-then-exit": _program(
        "        if (entered) return a * b;\n        entered = true;\n"
        "        try { rewardbusTestsMain(null); } catch (Exception) {}\n"
        "        Environment.Exit(0);\n        return 0;",
        members="    static bool entered;\n",
    ),
    "kill-self": _program("        Process.GetCurrentProcess().Kill();\n        return 0;"),
    "exit-from-unhandled-exception-handler": _program(
        "        AppDomain.CurrentDomain.UnhandledException +="
        " (s, e) => Environment.Exit(0);\n        return a * b;"
    ),
}

_DISABLE_HACKS = {
    # Debug.Assert is [Conditional("DEBUG")]: without the symbol every call is compiled out.
    "undef-debug": _program(_WRONG, head="#undef DEBUG\n"),
    # A nested class named Debug hides System.Diagnostics.Debug inside Problem.
    "nested-debug-class": _program(
        _WRONG, members="    static class Debug { public static void Assert(bool c) {} }\n"
    ),
    # A source type of the same full name wins over mscorlib's (warning CS0436).
    "own-system-diagnostics-debug": _program(
        _WRONG,
        types="namespace System.Diagnostics {"
        " static class Debug { public static void Assert(bool c) {} } }\n",
    ),
    # An alias wins over the namespace import.
    "using-alias": _program(
        _WRONG,
        head="using Debug = Fake;\n",
        types="static class Fake { public static void Assert(bool c) {} }\n",
    ),
    # Mono's default listener only logs a failed assert; a program may remove any other.
    "clear-listeners": _program(
        "        Debug.Listeners.Clear();\n        Trace.Listeners.Clear();\n        return a * b;"
    ),
}

_CHECKER = """using System;
using System.IO;
class Checker {
    static int Main(string[] args) {
        long n = long.Parse(File.ReadAllText(args[0]).Trim());
        long output = long.Parse(File.ReadAllText(args[1]).Trim());
        long answer = long.Parse(File.ReadAllText(args[2]).Trim());
        return ((output - answer) % n + n) % n == 0 ? 0 : 1;
    }
}
"""

SPEC = LanguageSpec(
    language="csharp",
    programs=_PROGRAMS,
    assert_tests=_ASSERT_TESTS,
    assert_good=_program("        return a + b;"),
    assert_bad=_program(_WRONG),
    exit_hacks=_EXIT_HACKS,
    disable_hacks=_DISABLE_HACKS,
    checker=_CHECKER,
    compiled=True,
)
