"""D (LDC), in MultiPL-E's shape: a ``unittest`` block of asserts, then ``void main(){}``."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_HEAD = "import std.typecons;\nimport std.math;\n"


def _program(body: str, *, head: str = "", before: str = "", after: str = "") -> str:
    """A MultiPL-E completion: the imports, ``before``, ``add``, ``after``."""
    return f"{_HEAD}{head}{before}long add(long a, long b) \n{{\n{body}\n}}\n{after}"


_WRONG = "    return a * b;"

_ASSERT_TESTS = """unittest
{
    alias candidate = add;

    assert(candidate(2L, 3L) == 5L);
    assert(candidate(-1L, 1L) == 0L);
}
void main(){}
"""

_PROGRAMS = {
    Verdict.ACCEPTED: 'import std.stdio;\nvoid main() { long a, b; readf(" %d %d", &a, &b);'
    " writeln(a + b); }\n",
    Verdict.WRONG_ANSWER: "import std.stdio;\nvoid main() { writeln(0); }\n",
    Verdict.RUNTIME_ERROR: 'void main() { throw new Exception("boom"); }\n',
    Verdict.TIME_LIMIT: "__gshared ulong spin;\nvoid main() { while (true) spin++; }\n",
    Verdict.MEMORY_LIMIT: "void main() { ubyte[][] keep;"
    " while (true) { auto b = new ubyte[1 << 24]; b[] = 1; keep ~= b; } }\n",
    Verdict.OUTPUT_LIMIT: "import std.stdio;\n"
    'void main() { while (true) writeln("xxxxxxxxxxxxxxxx"); }\n',
    Verdict.COMPILE_ERROR: "void main() { int x = }\n",
}

_EXIT_HACKS = {
    "libc-exit-in-add": _program(
        "    exit(0);\n    return 0;", head="import core.stdc.stdlib : exit;\n"
    ),
    "posix-_exit-in-add": _program(
        "    _exit(0);\n    return 0;", head="import core.sys.posix.unistd : _exit;\n"
    ),
    "module-constructor-exit": _program(
        _WRONG,
        head="import core.stdc.stdlib : exit;\n",
        before="shared static this() { exit(0); }\n",
    ),
    "crt-constructor-exit": _program(
        _WRONG,
        head="import core.sys.posix.unistd : _exit;\n",
        before="pragma(crt_constructor) extern(C) void early() { _exit(0); }\n",
    ),
    "exit-group-system-call": _program(
        "    syscall(231, 0);\n    return 0;",
        before="extern(C) long syscall(long number, ...);\n",
    ),
    "execv": _program(
        '    const(char)*[2] argv = ["true".ptr, null];\n'
        '    execv("/bin/true", argv.ptr);\n    return 0;',
        head="import core.sys.posix.unistd : execv;\n",
    ),
    "exit-from-a-thread": _program(
        "    new Thread({ exit(0); }).start().join();\n    return 0;",
        head="import core.thread : Thread;\nimport core.stdc.stdlib : exit;\n",
    ),
    # The tests' unittest block (a function now) is a module-level symbol like any other.
    "run-the-tests-then-exit": _program(
        "    if (entered) return a * b;\n    entered = true;\n"
        "    try rewardbusUnittest1(); catch (Throwable) {}\n    exit(0);\n    return 0;",
        head="import core.stdc.stdlib : exit;\n",
        before="__gshared bool entered;\n",
    ),
}

_DISABLE_HACKS = {
    # druntime's unittest runner is replaceable: one that runs nothing reports success.
    "module-unit-tester": _program(
        _WRONG,
        head="import core.runtime : Runtime;\n",
        before="shared static this() { Runtime.moduleUnitTester = () => true; }\n",
    ),
    # A failed assert calls the assert handler; one that returns lets the test go on.
    "assert-handler": _program(
        _WRONG,
        head="import core.exception : assertHandler;\n",
        before="shared static this() {"
        " assertHandler = function(string file, size_t line, string message) nothrow {}; }\n",
    ),
    "assert-handler-set-in-add": _program(
        "    assertHandler = function(string file, size_t line, string message) nothrow {};\n"
        "    return a * b;",
        head="import core.exception : assertHandler;\n",
    ),
}

_CHECKER = """import std.conv : to;
import std.file : readText;
import std.string : strip;
int main(string[] args) {
    long n = args[1].readText.strip.to!long;
    long output = args[2].readText.strip.to!long;
    long answer = args[3].readText.strip.to!long;
    return ((output - answer) % n + n) % n == 0 ? 0 : 1;
}
"""

SPEC = LanguageSpec(
    language="d",
    programs=_PROGRAMS,
    assert_tests=_ASSERT_TESTS,
    assert_good=_program("    return a + b;"),
    assert_bad=_program(_WRONG),
    exit_hacks=_EXIT_HACKS,
    disable_hacks=_DISABLE_HACKS,
    checker=_CHECKER,
    compiled=True,
)
