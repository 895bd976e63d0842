"""PHP 8 scripts on the host's CLI interpreter, without php.ini."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
)
from schemas import Limits

__all__ = ["Php"]

# -n: no php.ini, so no host configuration (Debian's CLI php.ini sets zend.assertions = -1,
# which compiles assert() out) and no extension beyond those built in. Errors go to stderr
# (the CLI's default is stdout, where they would read as the program's output). No memory
# limit of PHP's own: the sandbox's is the one that says memory_limit.
_FLAGS = (
    "-n",
    "-d",
    "display_errors=stderr",
    "-d",
    "log_errors=0",
    "-d",
    "memory_limit=-1",
    "-d",
    "zend.assertions=1",
    "-d",
    "assert.exception=1",
)
# A script is HTML until an open tag; a program given without one (MultiPL-E's prompt
# holds it, a completion often does not) would print its own source.
_OPENS_PHP = re.compile(r"(?:#![^\n]*\n)?\s*<\?(?:php\s|=)", re.IGNORECASE)

# Put between the program and the tests (one source file). `?><?php` leaves PHP mode and
# comes back: a program that ended with `?>` would otherwise turn the tests into text
# printed to stdout. Then it undoes what a program could do to the tests' asserts:
# switching assert() off (zend.assertions = 0, assert_options(ASSERT_ACTIVE, 0)), making
# a failure a warning (assert.exception = 0) and hiding it (an error handler). Names are
# fully qualified: the program may have declared a namespace with functions of these names.
# MultiPL-E's tests fail by throwing a plain Exception("Test failed!"), which PHP reports
# as any uncaught exception (a runtime error): the handler says "assertion" for a plain
# Exception thrown by the test code (a line after the prelude), so that it is judged a
# wrong answer as a failed assert() is; anything else is reported as PHP does.
# An exit (exit, die, pcntl_exec, an exception handler that exits 0, __halt_compiler) is
# caught by the end marker (mark_tests_end).
_PRELUDE = """
?><?php
\\ini_set('zend.assertions', '1');
\\ini_set('assert.active', '1');
\\ini_set('assert.exception', '1');
\\ini_set('assert.bail', '0');
\\ini_set('assert.callback', '');
\\error_reporting(\\E_ALL);
\\set_error_handler(null);
\\set_exception_handler(static function (\\Throwable $e): void {
    $failed = \\get_class($e) === 'Exception'
        && $e->getFile() === __FILE__ && $e->getLine() > __LINE__;
    $where = "{$e->getFile()} on line {$e->getLine()}";
    \\fwrite(\\STDERR, $failed
        ? "{$e}\\nassertion failed in {$where}: {$e->getMessage()}\\n"
        : "PHP Fatal error:  Uncaught {$e}\\n  thrown in {$where}\\n");
    exit(255);
});
"""


class Php(Language):
    """PHP 8 CLI: ``php -n`` with assertions on and throwing."""

    name = "php"
    aliases = frozenset({"php", "php8"})
    fence_tags = frozenset({"php"})
    extension = "php"
    test_prelude = _PRELUDE

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        # Its modules are built in (-n loads no other): the binary is all the jail needs.
        return discover_binary(
            self.name,
            "php",
            ["-n", "-r", "echo PHP_VERSION;"],
            version=lambda version: f"php-{version}",
        )

    def prepare_source(self, source: str) -> str:
        # Same line, so that line numbers in messages stay the program's.
        return source if _OPENS_PHP.match(source) else f"<?php {source}"

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # Last, in PHP mode whatever the tests ended in: an exit before it (or a failure)
        # leaves it out. Built from its mask and key at run time: never text in the source.
        masked, key = masked_marker(marker)
        return (
            f"{tests}\n?><?php\n"
            f"\\fwrite(\\STDERR, \\implode(\\array_map(fn ($m, $k) => \\chr($m ^ $k),"
            f" [{byte_list(masked)}], [{byte_list(key)}])));\n"
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        # PHP opens the script before its request start-up: a warm pool forks there.
        return Launch(argv=(toolchain.paths["php"], *_FLAGS, entry), warm_after=entry)
