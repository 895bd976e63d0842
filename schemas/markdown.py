"""What opens a fenced code block in a model's Markdown answer: one rule for the worker's
extraction (``sandbox_workers.extract``) and the verl adapter, which decides whether a
response is Markdown to extract from or the program itself (``consumers.verl_tasks``)."""

from __future__ import annotations

import re

__all__ = ["FENCE_OPENING", "has_fence"]

# ``` or ~~~ (3 or more), then an info string whose first word is the language
# tag. Unlike CommonMark, any indentation is accepted: models nest fences in
# list items ("1. Solution:\n    ```python"). Every quantifier is possessive: with
# backtracking, "```" + spaces + "`" (or a run of "~") took time quadratic in the
# line, and a 1 MB line wedged the worker's event loop (hence its heartbeats) for hours.
FENCE_OPENING = re.compile(r"^[ \t]*+(?P<fence>`{3,}+|~{3,}+)(?P<info>[^`\n]*+)$")


def has_fence(text: str) -> bool:
    """Whether a line of ``text`` opens a fenced block (three backticks inside a line of
    a bare program do not)."""
    return any(FENCE_OPENING.match(line) for line in text.split("\n"))
