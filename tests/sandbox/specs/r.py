"""R: Rscript, MultiPL-E's stopifnot(isTRUE(all.equal(...))) tests."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_BAD_ADD = "add <- function(a, b) a * b\n"

SPEC = LanguageSpec(
    language="r",
    programs={
        Verdict.ACCEPTED: 'x <- scan(file("stdin"), quiet = TRUE)\ncat(x[1] + x[2], "\\n")\n',
        Verdict.WRONG_ANSWER: 'cat("0\\n")\n',
        Verdict.RUNTIME_ERROR: 'stop("boom")\n',
        Verdict.TIME_LIMIT: "repeat {}\n",
        Verdict.MEMORY_LIMIT: "keep <- list()\nrepeat keep[[length(keep) + 1]] <- runif(1e6)\n",
        Verdict.OUTPUT_LIMIT: 'repeat cat(strrep("x", 1000), "\\n")\n',
    },
    assert_tests="""test_humaneval <- function() {
    candidate <- add
    stopifnot(isTRUE(all.equal(candidate(2, 3), 5)))
    stopifnot(isTRUE(all.equal(candidate(-1, 1), 0)))
}
test_humaneval()
""",
    assert_good="add <- function(a, b) {\n    a + b\n}\n",
    assert_bad=_BAD_ADD,
    exit_hacks={
        "quit-in-add": "add <- function(a, b) quit(status = 0)\n",
        "q-at-load": "add <- function(a, b) a * b\nq(save = 'no', status = 0)\n",
        "base-quit-in-add": "add <- function(a, b) base::quit(save = 'no', status = 0)\n",
        "internal-quit-in-add": 'add <- function(a, b) .Internal(quit("no", 0L, FALSE))\n',
        # Jumps back to the script's top level; with an error option set (the prelude's),
        # R goes on with the next top-level expression and may end with status 0.
        "abort-restart-in-add": 'add <- function(a, b) invokeRestart("abort")\n',
        "abort-on-every-error": "add <- function(a, b) {\n"
        '    globalCallingHandlers(error = function(e) invokeRestart("abort"))\n'
        "    a * b\n}\n",
        "error-option-quits-0": "add <- function(a, b) {\n"
        "    options(error = function() base::quit(save = 'no', status = 0))\n"
        "    a * b\n}\n",
        "kill-itself": "add <- function(a, b) tools::pskill(Sys.getpid(), tools::SIGKILL)\n",
    },
    disable_hacks={
        "own-stopifnot": _BAD_ADD + "stopifnot <- function(...) invisible(TRUE)\n",
        "own-all-equal": _BAD_ADD + "all.equal <- function(target, current, ...) TRUE\n",
        "own-istrue": _BAD_ADD + "isTRUE <- function(x) TRUE\n",
    },
    checker="""args <- commandArgs(trailingOnly = TRUE)
first <- function(path) as.numeric(readLines(path, warn = FALSE)[1])
n <- first(args[1])
quit(save = "no", status = if ((first(args[2]) - first(args[3])) %% n == 0) 0 else 1)
""",
)
