"""Content fingerprints: equal for programs a toolchain cannot tell apart, different otherwise."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sandbox_workers.fingerprint import fingerprint, normalize_code
from schemas import Limits

DIGEST = "sha256:" + "ab" * 32
RUNTIME = "python-3.11.9/harness-1"
PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def fp(code: str, language: str = "python", **overrides: object) -> str:
    args: dict[str, object] = {
        "language": language,
        "code": code,
        "suite_digest": DIGEST,
        "limits": Limits(),
        "runtime_version": RUNTIME,
    }
    args.update(overrides)
    return fingerprint(**args)  # type: ignore[arg-type]


def test_is_a_sha256_and_deterministic() -> None:
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", fp(PROGRAM))
    assert fp(PROGRAM) == fp(PROGRAM)


def test_folds_what_the_toolchain_ignores() -> None:
    messy = "\n\n  \r\na, b = map(int, input().split())   \r\nprint(a + b)\t\r\n\n \n"
    assert fp(messy) == fp(PROGRAM)
    assert fp(PROGRAM.rstrip("\n")) == fp(PROGRAM)


def test_keeps_a_space_after_a_backslash() -> None:
    # "\\ " is a syntax error in Python; "\\" + newline is a line continuation.
    assert fp("x = 1 + \\ \n    2\n") != fp("x = 1 + \\\n    2\n")


def test_keeps_unicode_spaces() -> None:
    # A trailing U+00A0 is a syntax error in Python: not the same program.
    assert fp("x = 1\u00a0\n") != fp("x = 1\n")


def test_crlf_matters_where_the_toolchain_keeps_it() -> None:
    assert fp("echo hi\r\n", language="bash") != fp("echo hi\n", language="bash")
    assert fp("print(1)\r\n", language="python") == fp("print(1)\n", language="python")


def test_language_is_case_and_space_insensitive() -> None:
    assert fp(PROGRAM, language=" Python ") == fp(PROGRAM, language="python")


def test_every_other_input_matters() -> None:
    base = fp(PROGRAM)
    assert fp(PROGRAM, language="javascript") != base
    assert fp(PROGRAM, suite_digest="sha256:" + "cd" * 32) != base
    assert fp(PROGRAM, limits=Limits(time_s=1.0)) != base
    assert fp(PROGRAM, limits=Limits(memory_mb=256)) != base
    assert fp(PROGRAM, runtime_version="python-3.12.1/harness-1") != base
    assert fp(PROGRAM.replace("+", "-")) != base
    assert fp("  " + PROGRAM) != base  # leading indentation is syntax


def test_limits_compare_by_value() -> None:
    assert fp(PROGRAM, limits=Limits(time_s=2)) == fp(PROGRAM, limits=Limits(time_s=2.0))
    assert fp(PROGRAM, limits=Limits(time_s=5.0)) == fp(PROGRAM, limits=Limits())


# -- properties -----------------------------------------------------------------------

_line = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=40,
)
_lines = st.lists(_line, max_size=12)
_padding = st.text(alphabet=" \t", max_size=4)


@st.composite
def _noisy(draw: st.DrawFn) -> tuple[str, str]:
    """A program and the same program with line-end noise, blank lines and CRLF."""
    lines = draw(_lines)
    noisy = []
    for line in lines:
        stripped = line.rstrip(" \t")
        # After a backslash the padding is part of the program (see the module doc).
        noisy.append(line if stripped.endswith("\\") else stripped + draw(_padding))
    head = draw(st.lists(_padding, max_size=3))
    tail = draw(st.lists(_padding, max_size=3))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return "\n".join(lines), eol.join([*head, *noisy, *tail])


@given(_noisy())
def test_noise_never_changes_the_fingerprint(pair: tuple[str, str]) -> None:
    clean, noisy = pair
    assert fp(noisy) == fp(clean)


@given(_lines.map("\n".join))
def test_normalisation_is_idempotent(code: str) -> None:
    once = normalize_code("python", code)
    assert normalize_code("python", once) == once


@given(_lines.map("\n".join), st.data())
def test_any_visible_change_changes_the_fingerprint(code: str, data: st.DataObject) -> None:
    visible = [i for i, ch in enumerate(code) if not ch.isspace()]
    if not visible:
        code, visible = "x", [0]
    at = data.draw(st.sampled_from(visible))
    replacement = data.draw(
        st.characters(exclude_categories=["Cs", "Zs", "Zl", "Zp", "Cc"]).filter(
            lambda ch: ch != code[at]
        )
    )
    changed = code[:at] + replacement + code[at + 1 :]
    assert fp(changed) != fp(code)


@given(st.text(max_size=200), st.text(max_size=200))
def test_different_normal_forms_never_collide(a: str, b: str) -> None:
    if normalize_code("python", a) != normalize_code("python", b):
        assert fp(a) != fp(b)
