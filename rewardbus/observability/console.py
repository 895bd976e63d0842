"""Rich renderables as text: with colours for a terminal, or plain for a pipe or a file.

The views (the trace waterfall, ``rewardbus top``'s frame) are built once as
``rich`` tables; this turns one into the text a command prints. Plain text has no
control codes and no colours, and, unless a width is given, is never wrapped or
cut, so a script reading a pipe sees every column.
"""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

__all__ = ["PLAIN_WIDTH", "render_text"]

# "Unlimited": wide enough that no row of a view wraps or loses its tail.
PLAIN_WIDTH = 10_000


def render_text(renderable: RenderableType, *, terminal: bool, width: int | None = None) -> str:
    """``renderable`` as lines of text, trailing spaces removed.

    ``terminal``: colours and styles, at ``width`` or the terminal's width. Otherwise
    plain text at ``width`` (default :data:`PLAIN_WIDTH`).
    """
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=terminal,
        color_system="auto" if terminal else None,
        width=width if width is not None or terminal else PLAIN_WIDTH,
        highlight=False,
        emoji=False,
        markup=False,
    )
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
