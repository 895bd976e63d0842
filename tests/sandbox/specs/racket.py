"""Racket: raco make, MultiPL-E's rackunit tests (check-equal? in test-humaneval)."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_BAD_ADD = "#lang racket\n(define (add a b) (* a b))\n"

SPEC = LanguageSpec(
    language="racket",
    programs={
        Verdict.ACCEPTED: "#lang racket\n(define a (read))\n(define b (read))\n"
        "(displayln (+ a b))\n",
        Verdict.WRONG_ANSWER: "#lang racket\n(displayln 0)\n",
        Verdict.RUNTIME_ERROR: '#lang racket\n(error "boom")\n',
        Verdict.TIME_LIMIT: "#lang racket\n(let loop () (loop))\n",
        Verdict.MEMORY_LIMIT: "#lang racket\n(define keep '())\n"
        "(let loop () (set! keep (cons (make-bytes (* 16 1024 1024) 1) keep)) (loop))\n",
        Verdict.OUTPUT_LIMIT: "#lang racket\n"
        "(let loop () (displayln (make-string 1000 #\\x)) (loop))\n",
        Verdict.COMPILE_ERROR: "#lang racket\n(define (f x) (+ x undefined-name))\n",
    },
    assert_tests="""(require rackunit)

(define (test-humaneval)
  (let (( candidate add))
    (check-equal? (candidate 2 3) 5)
    (check-equal? (candidate -1 1) 0)
))

(test-humaneval)
""",
    # No #lang line: the program is #lang racket all the same.
    assert_good="(define (add a b)\n  (+ a b))\n",
    assert_bad=_BAD_ADD,
    exit_hacks={
        "exit-in-add": "#lang racket\n(define (add a b) (exit 0))\n",
        "exit-at-load": _BAD_ADD + "(exit 0)\n",
        "exit-handler-in-add": "#lang racket\n(define (add a b) ((exit-handler) 0))\n",
        "exit-at-compile-time": _BAD_ADD + "(begin-for-syntax (exit 0))\n",
        "custodian-shutdown": "#lang racket\n"
        "(define (add a b) (custodian-shutdown-all (current-custodian)))\n",
        # Exits stay 0 whatever the status: a failed check cannot end the process.
        "exit-handler-ignores-status": _BAD_ADD + "(define real-exit (exit-handler))\n"
        "(exit-handler (lambda (status) (real-exit 0)))\n",
        # The first answer right, every later check switched off.
        "check-around-switched-off": "#lang racket\n(define (add a b)\n"
        "  (current-check-around (lambda (check) (void)))\n  (if (= a 2) 5 (* a b)))\n",
    },
    disable_hacks={
        "own-check-equal": _BAD_ADD + "(define (check-equal? actual expected) (void))\n",
        "own-let": _BAD_ADD + "(define-syntax-rule (let bindings body ...) (void))\n",
        "own-require": _BAD_ADD
        + "(define-syntax-rule (require spec ...) (void))\n"
        + "(define (check-equal? actual expected) (void))\n",
        "check-handler-at-load": _BAD_ADD + "(require rackunit)\n(current-check-handler void)\n",
        "check-handler-in-add": "#lang racket\n(require rackunit)\n"
        "(define (add a b) (current-check-handler void) (* a b))\n",
    },
    checker="""#lang racket
(define args (current-command-line-arguments))
(define (number-in path) (string->number (string-trim (file->string path))))
(define n (number-in (vector-ref args 0)))
(define same (zero? (modulo (- (number-in (vector-ref args 1)) (number-in (vector-ref args 2))) n)))
(exit (if same 0 1))
""",
    compiled=True,
)
