"""Finding the program in a model's response.

Models answer in Markdown. The program is the *last* fenced block tagged with
the completion's language (models often show a first attempt, then the fix);
when no block carries such a tag, the last untagged block. Blocks tagged with
another language (sample output in ```text, a shell session in ```bash for a
Python task) are never taken. A final fence the model did not close (the
response hit its token limit) still counts: the code up to the end is usually
all there. A completion that carries ``code`` submits that instead
(:func:`program_of`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sandbox_workers.languages import lookup
from schemas import Completion
from schemas.markdown import FENCE_OPENING

__all__ = ["CodeBlock", "extract_code", "fenced_blocks", "program_of"]


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its lower-cased tag ('' when bare) and its body."""

    tag: str
    body: str
    closed: bool = True


def fenced_blocks(text: str) -> list[CodeBlock]:
    """All fenced code blocks of a Markdown text, in order."""
    blocks: list[CodeBlock] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE_OPENING.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening.group("fence")
        tag = _tag(opening.group("info"))
        indent = opening.start("fence")
        body: list[str] = []
        index += 1
        closed = False
        while index < len(lines):
            if _closes(lines[index], fence):
                closed = True
                break
            body.append(_dedent(lines[index], indent))
            index += 1
        blocks.append(
            CodeBlock(tag=tag, body="\n".join(body) + "\n" if body else "", closed=closed)
        )
        index += 1
    return blocks


def program_of(completion: Completion, language: str) -> str | None:
    """The program a completion submits: its ``code`` when that has any, else the code
    block of its ``response``; None when there is none.

    The one rule: the executor judges this text and the result cache keys it, so a
    cached verdict always answers for the program that was judged.
    """
    code, response = completion.code, completion.response
    if code is not None and code.strip():
        return code
    return extract_code(response, language) if response else None


def extract_code(response: str, language: str) -> str | None:
    """The program in ``response`` for ``language``; None when there is none.

    Whitespace-only code counts as none. A response without any fence is not
    guessed at: prose is not code.
    """
    spec = lookup(language)
    tags = spec.fence_tags if spec is not None else frozenset({language.lower()})
    blocks = fenced_blocks(response)
    chosen = _last(block for block in blocks if block.tag in tags)
    if chosen is None:
        chosen = _last(block for block in blocks if block.tag == "")
    if chosen is None or not chosen.body.strip():
        return None
    return chosen.body


def _tag(info: str) -> str:
    words = info.strip().split()
    if not words:
        return ""
    # "{.python}" and "python title=x" both name python.
    return words[0].strip("{}.").lower()


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def _dedent(line: str, indent: int) -> str:
    # As CommonMark does: a fence indented N columns takes up to N leading
    # spaces off each line, so code in a list item is not left indented.
    spaces = len(line) - len(line.lstrip(" \t"))
    return line[min(spaces, indent) :]


def _last(blocks: Iterable[CodeBlock]) -> CodeBlock | None:
    last = None
    for block in blocks:
        last = block
    return last
