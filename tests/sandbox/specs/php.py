"""PHP: `php -n`; a program may come without its `<?php` open tag, as MultiPL-E's completions do."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

# Checks add(-1, 1) only: the disable hacks' add is wrong where assert() checks it.
_WRONG_ADD = "function add($a, $b) {\n    return $a * $b + 1;\n}\n"

SPEC = LanguageSpec(
    language="php",
    programs={
        # No open tag: prepare_source adds it.
        Verdict.ACCEPTED: "[$a, $b] = array_map('intval', preg_split('/\\s+/',"
        ' trim(stream_get_contents(STDIN))));\necho $a + $b, "\\n";\n',
        Verdict.WRONG_ANSWER: '<?php\necho "0\\n";\n',
        Verdict.RUNTIME_ERROR: "<?php\nthrow new Exception('boom');\n",
        Verdict.TIME_LIMIT: "<?php\nwhile (true) {}\n",
        Verdict.MEMORY_LIMIT: "<?php\n$keep = [];\n"
        "while (true) { $keep[] = str_repeat('x', 1 << 20); }\n",
        Verdict.OUTPUT_LIMIT: "<?php\nwhile (true) { echo str_repeat('x', 1000), \"\\n\"; }\n",
    },
    # MultiPL-E's shape (a check that throws), with one check by PHP's own assert(), which
    # a program could try to switch off.
    assert_tests="function candidate(...$args) {\n"
    "    return add(...$args);\n"
    "}\n\n"
    "function test(): void {\n"
    '    if (candidate(-1, 1) !== 0) { throw new Exception("Test failed!"); }\n'
    "    assert(candidate(2, 3) === 5);\n"
    "}\n\n"
    "test();\n",
    # With its open tag and a closing one: the tests after it still run as PHP.
    assert_good="<?php\nfunction add($a, $b) {\n    return $a + $b;\n}\n?>\n",
    assert_bad="function add($a, $b) {\n    return $a * $b;\n}\n",
    exit_hacks={
        "exit-in-add": "function add($a, $b) {\n    exit(0);\n}\n",
        "die-in-add": "function add($a, $b) {\n    die();\n}\n",
        "exit-at-load": f"exit(0);\n{_WRONG_ADD}",
        "exec-in-add": "function add($a, $b) {\n    pcntl_exec('/bin/true');\n}\n",
        "exception-handler-exits": "set_exception_handler(function ($e) { exit(0); });\n"
        + _WRONG_ADD,
        "shutdown-exits": f"register_shutdown_function(function () {{ exit(0); }});\n{_WRONG_ADD}",
        # The rest of the file (the tests) is never compiled.
        "halt-compiler": f"{_WRONG_ADD}__halt_compiler();\n",
        # The tests after a closing tag would be text, printed.
        "closing-tag": f"<?php\n{_WRONG_ADD}?>\n",
    },
    disable_hacks={
        "zend-assertions-off": f"ini_set('zend.assertions', '0');\n{_WRONG_ADD}",
        "assert-options-inactive": f"assert_options(ASSERT_ACTIVE, 0);\n{_WRONG_ADD}",
        "assert-failure-a-hidden-warning": "ini_set('assert.exception', '0');\n"
        f"set_error_handler(fn () => true);\n{_WRONG_ADD}",
        # Functions of the prelude's names in the program's namespace, which the tests share.
        "namespace-shadows-the-prelude": "namespace Hack;\n"
        "\\ini_set('assert.exception', '0');\n\\set_error_handler(fn () => true);\n"
        "function ini_set(...$args) {}\nfunction set_error_handler(...$args) {}\n" + _WRONG_ADD,
    },
    checker="[$input, $output, $answer] = array_map(fn ($name) => trim(file_get_contents($name)),"
    " array_slice($argv, 1));\n"
    "exit((intval($output) - intval($answer)) % intval($input) === 0 ? 0 : 1);\n",
)
