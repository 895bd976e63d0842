"""The training curves as a PNG, drawn with matplotlib (its Agg renderer: no display).

One panel per series (mean reward, mean response length, reward latency,
rewards/s), step on the x axis, each titled with its last value; the reward panel
also draws the acceptance bar's guide lines, and every panel a red vertical line
at each step a resumed run began.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["MARKER_COLOUR", "Series", "curves_figure", "plot_curves"]

_PANEL_W, _PANEL_H = 4.8, 2.6  # inches, at 100 dpi: 480 x 260 pixels a panel
MARKER_COLOUR = "tab:red"
_GUIDE_COLOUR = "0.55"


@dataclass(frozen=True)
class Series:
    """One curve: a title, a value per step, a matplotlib colour, a unit."""

    title: str
    values: Sequence[float]
    colour: str
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
    """Draw ``series`` (:func:`curves_figure`) and write the PNG to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    curves_figure(series, title=title, markers=markers).savefig(out, format="png", dpi=100)
    return out


def curves_figure(
    series: Sequence[Series], *, title: str, markers: Sequence[tuple[int, str]] = ()
) -> Figure:
    """``series`` in a two-column grid of panels.

    ``markers``: (step, label) drawn as a vertical line across every panel.
    """
    columns = 2
    rows = max(1, (len(series) + columns - 1) // columns)
    # A Figure of its own, not pyplot's: no global state, no GUI backend.
    figure = Figure(figsize=(columns * _PANEL_W, rows * _PANEL_H + 0.3), layout="constrained")
    figure.suptitle(title, x=0.01, ha="left", fontsize=10)
    panels: list[Axes] = list(figure.subplots(rows, columns, squeeze=False).flat)
    for axes, one in zip(panels, series, strict=False):
        _panel(axes, one, markers)
    for unused in panels[len(series) :]:
        unused.set_visible(False)
    return figure


def _panel(axes: Axes, series: Series, markers: Sequence[tuple[int, str]]) -> None:
    values = list(series.values)
    last = f"  last {values[-1]:.3g}{series.unit}" if values else ""
    axes.set_title(f"{series.title}{last}", loc="left", fontsize=9)
    axes.set_xlabel("step", fontsize=8)
    axes.tick_params(labelsize=8)
    axes.grid(True, color="0.9")
    axes.set_xlim(0, max(1, len(values) - 1))
    if series.fixed_range is not None:
        axes.set_ylim(*series.fixed_range)
    for value, label in series.guides:
        axes.axhline(value, color=_GUIDE_COLOUR, linewidth=1, linestyle="--")
        axes.annotate(
            label,
            (1.0, value),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=7,
            color=_GUIDE_COLOUR,
        )
    for step, label in markers:
        axes.axvline(step, color=MARKER_COLOUR, linewidth=1)
        axes.annotate(
            label,
            (step, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -10),
            textcoords="offset points",
            fontsize=7,
            color=MARKER_COLOUR,
        )
    axes.plot(
        range(len(values)),
        values,
        color=series.colour,
        linewidth=2,
        marker="o" if len(values) == 1 else None,
    )
