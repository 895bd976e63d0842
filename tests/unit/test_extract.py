"""Code extraction from model responses."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_workers.extract import extract_code, fenced_blocks

FENCE = "```"


def fence(tag: str, body: str) -> str:
    return f"{FENCE}{tag}\n{body}\n{FENCE}"


@pytest.mark.parametrize(
    ("language", "tag"),
    [
        ("python", "python"),
        ("python", "py"),
        ("python", "Python3"),
        ("cpp", "cpp"),
        ("cpp", "c++"),
        ("c++", "cpp"),
        ("javascript", "js"),
        ("js", "javascript"),
        ("go", "golang"),
        ("rust", "rs"),
        ("java", "java"),
        ("sql", "sqlite"),
        ("bash", "sh"),
    ],
)
def test_language_fences_are_recognised(language: str, tag: str) -> None:
    response = f"Here you go:\n\n{fence(tag, 'CODE')}\n\nHope it helps."
    assert extract_code(response, language) == "CODE\n"


def test_last_tagged_block_wins() -> None:
    response = f"First try:\n{fence('python', 'v1')}\nFixed:\n{fence('python', 'v2')}\n"
    assert extract_code(response, "python") == "v2\n"


def test_tagged_block_beats_a_later_bare_block() -> None:
    response = f"{fence('python', 'code')}\nSample output:\n{fence('', '42')}"
    assert extract_code(response, "python") == "code\n"


def test_bare_block_is_accepted_without_a_tagged_one() -> None:
    assert extract_code(fence("", "print(1)"), "python") == "print(1)\n"


def test_blocks_of_other_languages_are_ignored() -> None:
    response = f"{fence('text', 'output')}\n{fence('bash', 'python main.py')}"
    assert extract_code(response, "python") is None


def test_prose_without_fences_is_no_code() -> None:
    assert extract_code("def f(): return 1", "python") is None


@pytest.mark.parametrize("body", ["", "   ", "\n\n\t\n"])
def test_whitespace_only_block_is_no_code(body: str) -> None:
    assert extract_code(f"{FENCE}python\n{body}\n{FENCE}", "python") is None


def test_unclosed_final_fence_counts() -> None:
    # A response cut off by the token limit still carries its code.
    assert extract_code("Answer:\n```python\nx = 1\nprint(x)", "python") == "x = 1\nprint(x)\n"


def test_tilde_fences_and_info_strings() -> None:
    assert extract_code("~~~python title=solution.py\nx = 1\n~~~", "python") == "x = 1\n"
    assert extract_code("```{.python}\nx = 2\n```", "python") == "x = 2\n"


def test_longer_fence_contains_shorter_ones() -> None:
    body = 'doc = """\n```\nnot a fence end\n```\n"""'
    assert extract_code(f"````python\n{body}\n````", "python") == body + "\n"


def test_indented_fences_inside_list_items() -> None:
    assert extract_code("   ```python\n   x = 1\n   ```", "python") == "x = 1\n"
    response = "1. Read the input.\n2. Solution:\n    ```python\n    print(1)\n    ```\n"
    assert fenced_blocks(response)[0].body == "print(1)\n"
    nested = "  ```python\n  if x:\n      y()\n  ```"
    assert extract_code(nested, "python") == "if x:\n    y()\n"


_code_line = st.text(
    alphabet=st.characters(
        blacklist_categories=["Cs"],
        blacklist_characters="`~\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
    ),
    max_size=40,
)


@given(
    lines=st.lists(_code_line, min_size=1, max_size=8),
    before=st.sampled_from(["", "Here is the solution.\n", "Thinking...\n\nDone.\n"]),
    after=st.sampled_from(["", "\nThis runs in O(n).", "\n```text\n3\n```"]),
)
def test_extraction_returns_the_fenced_code(lines: list[str], before: str, after: str) -> None:
    body = "\n".join(lines)
    response = f"{before}```python\n{body}\n```{after}"
    extracted = extract_code(response, "python")
    if body.strip():
        assert extracted == body + "\n"
    else:
        assert extracted is None


@pytest.mark.parametrize(
    "line",
    ["```" + " " * 200_000 + "`", "~~~" + "~" * 200_000 + "`", " " * 200_000 + "x"],
    ids=["spaces-then-backtick", "tildes-then-backtick", "indent-only"],
)
def test_fence_matching_is_linear_in_the_line(line: str) -> None:
    """These lines took quadratic time to reject (minutes at 200 KB, hours at 1 MB)."""
    started = time.monotonic()
    assert extract_code(f"{line}\n```python\nprint(1)\n```\n", "python") == "print(1)\n"
    assert time.monotonic() - started < 1.0
