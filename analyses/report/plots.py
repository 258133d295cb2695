"""What every study figure shares: one palette, a log-step x axis that shows step 0, and writing.

* Colours: a split (train / val / adv ...), a milestone and a head (``L0H1``) each get one
  colour, the same in every panel and every figure of a run, so a reader follows a head from
  the circuit-evolution figure to the explorer and the fingerprint bars.
* `StepAxis`: training curves are read on a log step axis (most change happens early), but a
  log axis cannot show step 0, where every run starts. The axis draws step 0 half of the first
  positive step to its left, labels that tick "0", and keeps the true step in each point's
  ``customdata`` for the hover text. On a log axis plotly places *shapes* in data units but
  *annotations* in log10 units (an annotation at x = 261 lands at 10^261 and stretches the
  axis there: the bug of the old circuit-evolution figure, whose `add_vline(annotation_text=...)`
  labelled the phase-2 onset that way). `StepAxis.shape_x` and `StepAxis.annotation_x` give
  each the coordinate it needs.
* `write_figure`: HTML with plotly.js in a file beside it (``include_plotlyjs="directory"``),
  written atomically, so a folder of many figures stays small and opens offline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from interp.store.atomic import atomic_write_text

SPLIT_COLOURS = {"train": "#636efa", "val": "#00a37a", "adv": "#ef553b", "test": "#ab63fa"}
MILESTONE_COLOURS = {"generalized": "#ef553b", "rule": "#00a37a", "memorized": "#7f7f7f"}
# Heads get a palette disjoint from the split colours (Dark2, then Set1's darker hues).
HEAD_PALETTE = (
    "#1b9e77",
    "#d95f02",
    "#7570b3",
    "#e7298a",
    "#66a61e",
    "#e6ab02",
    "#a6761d",
    "#666666",
    "#377eb8",
    "#984ea3",
)
_FALLBACK = "#444444"
PLOTLY_JS = "plotly.min.js"


def split_colour(split: str) -> str:
    """The colour of a split in every figure."""
    return SPLIT_COLOURS.get(split, _FALLBACK)


def milestone_colour(name: str) -> str:
    """The colour of a milestone (generalized, rule, memorized, ...) in every figure."""
    return MILESTONE_COLOURS.get(name, _FALLBACK)


def head_label(layer: int, head: int) -> str:
    """``L{layer}H{head}``: how figures and tables name a head."""
    return f"L{layer}H{head}"


def head_colour(layer: int, head: int, n_heads: int) -> str:
    """The colour of a head, the same wherever that head appears in a run's figures."""
    return HEAD_PALETTE[(layer * n_heads + head) % len(HEAD_PALETTE)]


class StepAxis:
    """A log (or linear) step axis on which step 0 has a place.

    Args:
        steps: Every step any trace of the figure will plot.
        log: Log axis (default) or linear.
    """

    def __init__(self, steps: Iterable[int], *, log: bool = True):
        steps = sorted({int(s) for s in steps})
        self.log = log
        positive = [s for s in steps if s > 0] or [1]
        self.zero_at = positive[0] / 2 if log else 0.0
        self.low = self.zero_at if steps and steps[0] <= 0 else positive[0]
        self.high = max(positive[-1], self.low)

    def positions(self, steps: Sequence[int]) -> list[float]:
        """The x data coordinates of `steps` (step 0 at `zero_at` on a log axis)."""
        return [self.zero_at if self.log and s <= 0 else float(s) for s in steps]

    def trace(self, steps: Sequence[int]) -> dict[str, Any]:
        """``x`` and ``customdata`` (the true steps) for a trace: hover with ``%{customdata}``."""
        return {"x": self.positions(steps), "customdata": list(steps)}

    def shape_x(self, step: int) -> float:
        """The x coordinate of a shape at `step` (shapes take data units on every axis type)."""
        return self.positions([step])[0]

    def annotation_x(self, step: int) -> float:
        """The x coordinate of an annotation at `step` (log10 units on a log axis)."""
        x = self.positions([step])[0]
        return math.log10(x) if self.log else x

    def range(self) -> list[float]:
        """The axis range (log10 units on a log axis), with a little room either side."""
        if not self.log:
            pad = 0.02 * max(self.high - self.low, 1)
            return [self.low - pad, self.high + pad]
        low, high = math.log10(self.low), math.log10(self.high)
        pad = 0.03 * max(high - low, 1)
        return [low - pad, high + pad]

    def layout(self, title: str = "epoch") -> dict[str, Any]:
        """The axis settings (for `fig.update_xaxes(**layout)`): type, range, ticks, title."""
        if not self.log:
            return {"type": "linear", "range": self.range(), "title_text": title}
        decades = range(math.floor(math.log10(self.low)), math.ceil(math.log10(self.high)) + 1)
        ticks = [10.0**d for d in decades if self.low <= 10.0**d <= self.high and 10.0**d > self.zero_at]
        values, text = [*ticks], [f"{t:,.0f}" if t >= 1 else f"{t:g}" for t in ticks]
        if self.low == self.zero_at:
            values, text = [self.zero_at, *values], ["0", *text]
        return {
            "type": "log",
            "range": self.range(),
            "tickvals": values,
            "ticktext": text,
            "title_text": f"{title} (log scale)",
        }


def add_step_marker(
    fig: go.Figure,
    axis: StepAxis,
    step: int,
    text: str,
    *,
    rows: int = 1,
    label_row: int = 1,
    colour: str = "#444444",
    label_y: float = 1.0,
) -> None:
    """A dotted vertical line at `step` through every row of a one-column figure, labelled once.

    The line is a shape (data units), its label an annotation (log10 units on a log axis).
    A figure made without `make_subplots` has one row.
    """
    for row in range(1, rows + 1):
        where = {"row": row, "col": 1} if rows > 1 else {}
        fig.add_vline(x=axis.shape_x(step), line_dash="dot", line_color=colour, line_width=1.5, **where)
    suffix = "" if label_row == 1 else str(label_row)
    low, high = axis.range()
    # The label reads away from the nearer edge, so it never runs out of the panel.
    right_half = axis.annotation_x(step) > (low + high) / 2
    fig.add_annotation(
        x=axis.annotation_x(step),
        y=label_y,
        xref=f"x{suffix}",
        yref=f"y{suffix} domain",
        text=text,
        showarrow=False,
        xanchor="right" if right_half else "left",
        yanchor="top",
        font={"color": colour},
        bgcolor="rgba(255,255,255,0.8)",
    )


def write_plotly_js(folder: str | Path) -> Path:
    """Put plotly.js into `folder` once (what ``include_plotlyjs="directory"`` pages load)."""
    from plotly.offline import get_plotlyjs

    target = Path(folder) / PLOTLY_JS
    if not target.exists():
        atomic_write_text(target, get_plotlyjs())
    return target


def write_figure(fig: go.Figure, path: str | Path) -> Path:
    """Write `fig` as an HTML page that loads plotly.js from a file beside it (offline).

    Animated figures (the explorer's slider) start at their first frame: plotly's own
    autoplay animates without redrawing, which leaves heatmaps blank.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_plotly_js(path.parent)
    atomic_write_text(path, fig.to_html(include_plotlyjs="directory", full_html=True, auto_play=False))
    return path
