"""``rewardbus top``'s output: redrawn in place on a terminal, appended plain text elsewhere."""

from __future__ import annotations

import asyncio
import io

from rewardbus.observability.top import TopOptions, run_top

# Nothing listens on the discard port: every frame names the source that did not answer.
NOWHERE = "http://127.0.0.1:9"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def _frames(out: io.StringIO, *, once: bool) -> int:
    options = TopOptions(prometheus_url=NOWHERE, interval_s=0.05, once=once, timeout_s=1)
    return await run_top(options, out=out, shutdown=asyncio.sleep(0.5))


async def test_a_terminal_gets_one_screen_redrawn_in_place() -> None:
    out = Terminal()
    assert await _frames(out, once=False) == 0
    screen = out.getvalue()
    assert screen.count("rewardbus top - last 30.0 s - 1 source(s)") >= 2  # redrawn...
    assert "\x1b[1A" in screen and "\x1b[2K" in screen  # ...over the previous frame
    assert f"! no Prometheus at {NOWHERE}" in screen


async def test_a_pipe_gets_each_frame_appended_as_plain_text() -> None:
    out = io.StringIO()
    assert await _frames(out, once=False) == 0
    text = out.getvalue()
    assert "\x1b" not in text
    frames = text.count("rewardbus top - last 30.0 s - 1 source(s)\n")
    assert frames >= 2
    assert text.count(f"! no Prometheus at {NOWHERE}") == frames


async def test_once_on_a_terminal_draws_one_coloured_frame() -> None:
    out = Terminal()
    assert await _frames(out, once=True) == 1  # no source answered
    screen = out.getvalue()
    assert screen.count("rewardbus top - ") == 1
    assert "\x1b[1m" in screen  # styled
    assert "\x1b[1A" not in screen  # not redrawn
