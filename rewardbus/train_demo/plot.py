"""The training curves as a PNG, drawn with Pillow (matplotlib is not a dependency).

One panel per series (mean reward, mean response length, reward latency,
rewards/s), step on the x axis, each with its axis range and last value written
on it; the reward panel also draws the first and last windows' means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

__all__ = ["Series", "plot_curves"]

_PANEL_W, _PANEL_H = 480, 260
_MARGIN_L, _MARGIN_R, _MARGIN_T, _MARGIN_B = 58, 16, 30, 34
_BACKGROUND, _AXIS, _GRID, _TEXT = "white", (60, 60, 60), (225, 225, 225), (20, 20, 20)


@dataclass(frozen=True)
class Series:
    """One curve: a title, a unit, a value per step and a colour."""

    title: str
    values: Sequence[float]
    colour: tuple[int, int, int]
    unit: str = ""
    fixed_range: tuple[float, float] | None = None
    guides: Sequence[tuple[float, str]] = ()


def plot_curves(
    path: str | Path,
    series: Sequence[Series],
    *,
    title: str,
    markers: Sequence[tuple[int, str]] = (),
) -> Path:
    """Draw ``series`` in a two-column grid of panels and write the PNG to ``path``.

    ``markers``: (step, label) drawn as a vertical line across every panel.
    """
    columns = 2
    rows = (len(series) + columns - 1) // columns
    image = Image.new("RGB", (columns * _PANEL_W, rows * _PANEL_H + 28), _BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.text((10, 8), title, fill=_TEXT)
    for index, one in enumerate(series):
        left = (index % columns) * _PANEL_W
        top = 28 + (index // columns) * _PANEL_H
        _panel(draw, left, top, one, markers)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, format="PNG")
    return out


def _panel(
    draw: ImageDraw.ImageDraw,
    left: int,
    top: int,
    series: Series,
    markers: Sequence[tuple[int, str]],
) -> None:
    x0, y0 = left + _MARGIN_L, top + _MARGIN_T
    x1, y1 = left + _PANEL_W - _MARGIN_R, top + _PANEL_H - _MARGIN_B
    values = list(series.values)
    low, high = series.fixed_range or _range(values)
    last = f"  last {values[-1]:.3g}{series.unit}" if values else ""
    draw.text((x0, top + 8), f"{series.title}{last}", fill=_TEXT)
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = y1 - fraction * (y1 - y0)
        draw.line([(x0, y), (x1, y)], fill=_GRID)
        label = f"{low + fraction * (high - low):.4g}"
        draw.text((left + 4, y - 6), label, fill=_TEXT)
    draw.rectangle([x0, y0, x1, y1], outline=_AXIS)
    steps = max(1, len(values) - 1)
    draw.text((x0, y1 + 6), "step 0", fill=_TEXT)
    draw.text((x1 - 48, y1 + 6), f"step {len(values) - 1}", fill=_TEXT)

    def point(i: int, value: float) -> tuple[float, float]:
        span = (high - low) or 1.0
        clamped = min(max(value, low), high)
        return x0 + (x1 - x0) * i / steps, y1 - (y1 - y0) * (clamped - low) / span

    for value, label in series.guides:
        y = point(0, value)[1]
        draw.line([(x0, y), (x1, y)], fill=(170, 170, 170), width=1)
        draw.text((x1 - 7 * len(label) - 4, y - 13), label, fill=(110, 110, 110))
    for step, label in markers:
        x = point(step, low)[0]
        draw.line([(x, y0), (x, y1)], fill=(200, 40, 40), width=1)
        draw.text((x + 3, y0 + 2), label, fill=(200, 40, 40))
    if len(values) == 1:
        x, y = point(0, values[0])
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=series.colour)
    elif values:
        draw.line([point(i, v) for i, v in enumerate(values)], fill=series.colour, width=2)


def _range(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if high - low < 1e-9:
        return low - 0.5, high + 0.5
    pad = 0.05 * (high - low)
    return max(0.0, low - pad) if low >= 0 else low - pad, high + pad
