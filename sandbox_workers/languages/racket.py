"""Racket (Racket CS), a module per program, run by the system's racket."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    discover_binary,
    masked_marker,
    read_only,
)
from schemas import Limits

__all__ = ["Racket"]

# The runtime, racket and rackunit loaded (measured: 97 MB resident for a module that
# runs one rackunit check), outside the program's share of the memory limit. Racket CS
# has no heap-size flag: the cgroup's limit is the cap.
_RACKET_OVERHEAD_MB = 128
# The installation's paths (collects, pkgs, compiled-file roots) are read from here.
_RACKET_CONFIG = "/etc/racket"
_HAS_LANG = re.compile(r"(?:\s|;[^\n]*)*#(?:lang\s|!)")
_TESTS = "rewardbus-tests"

# An empty file the launch opens once racket, rackunit and the expander are loaded (a
# warm pool forks there: Launch.warm_after), before anything of the execution's.
_WARM_START = "rewardbus-warm-start"

# What `racket main.rkt` does (the configure-runtime submodule, the module, its main
# submodule), then the tests' submodule where a suite has one. Instantiated with
# dynamic-require, never required into the top level this code runs in: the program
# exports its definitions (for the tests), a macro named let among them. After `--`,
# the arguments a checker gets are command-line arguments, not files.
# First, what every program here loads (`#lang racket`, and rackunit for the tests:
# 0.19 s of a 0.32 s start, measured), then the warm start's file, then a seed for the
# default random generator as Racket's start-up draws one (from the clock): a zygote's
# executions would otherwise share the one it drew.
_RUN = (
    "(begin (dynamic-require 'racket #f) (dynamic-require 'rackunit #f)"
    f' (close-input-port (open-input-file "{_WARM_START}"))'
    " (random-seed (modulo (current-milliseconds) 2147483647))"
    ' (let* ([file \'(file "{entry}")]'
    " [run (lambda (name) (let ([sub (list 'submod file name)])"
    " (when (module-declared? sub #t) (dynamic-require sub #f))))])"
    " (run 'configure-runtime) (dynamic-require file #f) (run 'main) (run '{tests})))"
)

# MultiPL-E's tests follow the program in its module, so anything the program defines
# shadows them: its own check-equal? (a no-op), even a macro named let or define that
# rewrites the tests. So the tests become a submodule of the program's module, in the
# racket language, that imports the program's definitions except those that rackunit
# binds, and its macros whose names racket binds. A function of the program still
# shadows racket's of the same name (the function under test may be called gcd).
#
# rackunit reports a failed check on stderr and goes on: the process exits 0. Checks here
# run under an around of ours (not the current check handler, which the function under
# test could swap out) that exits with status 1 on the first failure, saying it was an
# assertion, and lets any other error escape (a crash). Exiting with status 0 during the
# tests fails too, with a message (the exit guard); the end marker is printed only after
# the tests ran, none failed, and the checks were still ours (rackunit's contract hands
# back a chaperone of the around we set). (str.format: the braces are ours.)
_TESTS_MODULE = """
(provide (all-defined-out))
(module* {tests} racket
(require (for-syntax racket/base) racket/require rackunit
         (prefix-in rewardbus-program: (submod ".."))
         (prefix-in rewardbus-rackunit: rackunit))
(require (filtered-in
          (lambda (name)
            (define (here prefix)
              (datum->syntax (quote-syntax here) (string->symbol (string-append prefix name))))
            (define (bound? prefix) (identifier-binding (here prefix) 0))
            (define (syntax? prefix) (syntax-local-value (here prefix) (lambda () #f)))
            (and (not (bound? "rewardbus-rackunit:"))
                 (not (and (bound? "") (syntax? "rewardbus-program:")))
                 name))
          (submod "..")))
(define rewardbus-exit (exit-handler))
(define rewardbus-done #f)
(define rewardbus-failed #f)
(define (rewardbus-failure raised)
  (set! rewardbus-failed #t)
  (unless (exn:test:check? raised) (raise raised))
  (eprintf "assertion failed: a rackunit check failed\\n")
  (for ([info (exn:test:check-stack raised)])
    (define value (check-info-value info))
    (eprintf "~a: ~s\\n" (check-info-name info)
             (if (struct? value) (vector-ref (struct->vector value) 1) value)))
  (rewardbus-exit 1)
  (error "assertion failed"))
(define (rewardbus-around check)
  (with-handlers ([(lambda (raised) #t) rewardbus-failure]) (check)))
(current-check-around rewardbus-around)
(exit-handler
 (lambda (status)
   (cond
     [(or rewardbus-done (and (byte? status) (positive? status))) (rewardbus-exit status)]
     [else (eprintf "\\nexit called during the tests\\n") (rewardbus-exit 86)])))
{body}
(set! rewardbus-done #t)
(when (and (not rewardbus-failed) (chaperone-of? (current-check-around) rewardbus-around))
  (let ([masked (bytes {masked})] [key (bytes {key})])
    (write-bytes (apply bytes (for/list ([m masked] [k key]) (bitwise-xor m k)))
                 (current-error-port))
    (flush-output (current-error-port)))))
"""


class Racket(Language):
    """Racket: ``raco make``, then racket runs the module (``#lang racket`` when it has none)."""

    name = "racket"
    aliases = frozenset({"racket", "rkt"})
    fence_tags = frozenset({"racket", "rkt", "scheme"})
    extension = "rkt"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        # The collections and packages live under /usr/share/racket (the jail's /usr).
        return discover_binary(
            self.name,
            "racket",
            ["--version"],
            version=_racket_version,
            mounts=lambda racket: read_only(racket.parent, _RACKET_CONFIG),
        )

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        # Expanding `#lang racket` at every run costs its compile-time half (measured:
        # 0.85 s of CPU for a stdin/stdout sum, 0.65 s from the .zo; a CPU limit is often
        # 1 s). The source goes along with its .zo: racket loads a module by its path.
        return CompileStep(
            argv=(toolchain.paths["racket"], "-N", "raco", "-l-", "raco", "make", source_name),
            entry=source_name,
            collect=(source_name, "compiled/*.zo"),
        )

    def prepare_source(self, source: str) -> str:
        # MultiPL-E's prompts start with `#lang racket`; a completion without it would be
        # no module at all.
        return source if _HAS_LANG.match(source) else f"#lang racket\n{source}"

    def mark_tests_end(self, tests: str, marker: str) -> str:
        # Not a test_prelude: the tests must sit inside the submodule this closes. The
        # marker is built from its mask and key at run time, never text in the source.
        masked, key = masked_marker(marker)
        # Racket reads a comma as unquote: the bytes are separated by spaces.
        return _TESTS_MODULE.format(
            tests=_TESTS,
            body=tests,
            masked=byte_list(masked).replace(",", " "),
            key=byte_list(key).replace(",", " "),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del limits
        return Launch(
            argv=(
                toolchain.paths["racket"],
                "-l",
                "racket/base",
                "-e",
                _RUN.format(entry=entry, tests=_TESTS),
                "--",
            ),
            # The .zo, not the source's modification time, decides (both are written
            # into the work directory at the same time, in no given order).
            env={"PLT_COMPILED_FILE_CHECK": "exists"},
            memory_overhead_mb=_RACKET_OVERHEAD_MB,
            files={_WARM_START: b""},
            warm_after=_WARM_START,
        )


def _racket_version(banner: str) -> str:
    match = re.search(r"v(\d+(?:\.\d+)+)", banner)
    return f"racket-{match.group(1)}" if match else banner
