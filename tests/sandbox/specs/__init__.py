"""One spec per added language: the programs and hacks its judging is tested with.

A language's module here (``ruby.py``...) defines ``SPEC``, a :class:`LanguageSpec`;
``tests/sandbox/test_language_specs.py`` runs every spec's assert suite, reward hacks,
checker and compile cache in the real jail, and ``tests/sandbox/test_languages.py``
adds its ``programs`` to the every-verdict table (with the stdin/stdout suite and limits
defined there). A new language is its module under ``sandbox_workers/languages/`` plus
one spec here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas import Verdict

__all__ = ["LanguageSpec", "all_specs"]


@dataclass(frozen=True)
class LanguageSpec:
    """What a language is judged with in the tests.

    - ``programs``: read two integers on stdin, print their sum; one program per verdict
      (accepted, wrong_answer, runtime_error, time_limit, memory_limit, output_limit, and
      compile_error for a compiled language), as ``test_languages.PROGRAMS``.
    - ``assert_tests``: MultiPL-E-shaped test code (the language's own asserts, its test
      library where MultiPL-E uses one) checking ``add(2, 3) == 5`` and ``add(-1, 1) == 0``
      of a program defining ``add``; ``assert_good`` passes it, ``assert_bad`` (a * b) fails.
    - ``exit_hacks``: programs that leave before the tests ran (exit 0 in ``add``, at load
      time, by every way the language has): never accepted.
    - ``disable_hacks``: programs that switch the asserts off or fake them, with a wrong
      ``add``: every one wrong_answer.
    - ``checker``: a checker in this language: ``argv`` = input, output, answer files; the
      input holds n; exit 0 when output == answer (mod n), 1 otherwise.
    """

    language: str
    programs: Mapping[Verdict, str]
    assert_tests: str
    assert_good: str
    assert_bad: str
    exit_hacks: Mapping[str, str] = field(default_factory=dict)
    disable_hacks: Mapping[str, str] = field(default_factory=dict)
    checker: str = ""
    compiled: bool = False


def all_specs() -> list[LanguageSpec]:
    """Every module's ``SPEC``, by language name."""
    specs = []
    for module in pkgutil.iter_modules(__path__):
        spec = importlib.import_module(f"{__name__}.{module.name}").SPEC
        assert isinstance(spec, LanguageSpec), module.name
        specs.append(spec)
    return sorted(specs, key=lambda spec: spec.language)
