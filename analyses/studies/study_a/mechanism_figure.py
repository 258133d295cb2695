"""The mechanism test's figure (`analyses.studies.study_a.mechanism`): the embedding probe's held-out
accuracy over epochs, one line per run, on all values, the larger half and the smaller half.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses.report.plots import StepAxis
from analyses.studies.study_a.mechanism import VALUE_SETS

# Blues for the positional shortcut, reds for the max shortcut: one shade per seed, so runs of a
# side read apart while the sides stay obvious.
SHORTCUT_COLOURS = {
    "first": ("#08519c", "#3182bd", "#6baed6", "#084594", "#4292c6"),
    "max": ("#a50f15", "#de2d26", "#fb6a4a", "#cb181d", "#ef3b2c"),
}


def mechanism_figure(frame: pd.DataFrame, threshold: float) -> go.Figure:
    """The figure of `MechanismResult.figure` from its frame."""
    axis = StepAxis(frame["epoch"], log=True)
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        subplot_titles=[f"held-out accuracy on {VALUE_SETS[k]}" for k in VALUE_SETS],
    )
    shown: set[str] = set()
    runs = frame.drop_duplicates("run")
    shade = {
        run: sum(runs["shortcut"].iloc[:i] == s)
        for i, (run, s) in enumerate(zip(runs["run"], runs["shortcut"]))
    }
    for row, values in enumerate(VALUE_SETS, 1):
        for run, part in frame.groupby("run", sort=False):
            palette = SHORTCUT_COLOURS.get(part["shortcut"].iloc[0], ("#444",))
            colour = palette[shade[run] % len(palette)]
            _add_run(fig, axis, part.sort_values("epoch"), run, (values, colour), row, shown)
        fig.add_hline(y=threshold, line_dash="dash", line_color="#444", line_width=1, row=row, col=1)
        fig.add_hline(y=0.5, line_dash="dot", line_color="#999", line_width=1, row=row, col=1)
        fig.update_yaxes(title_text="accuracy", range=[0, 1.04], row=row, col=1)
    fig.update_xaxes(**{**axis.layout(), "title_text": None}, showticklabels=True)
    fig.update_xaxes(title_text=axis.layout()["title_text"], row=3)
    fig.update_layout(
        height=1000,
        # The key in two short lines: one line is cut off at the width of a docs page.
        title="Mechanism test: token parity in the embedding W_E, per run<br><sup>blue: positional "
        "shortcut (first), red: max shortcut; diamond: phase-2 onset<br>dashed: threshold "
        f"{threshold:g}; grey: permuted-label baseline (95th percentile)</sup>",
        margin={"t": 120},
        hovermode="closest",
        legend={"title": {"text": "run"}, "y": 0.9, "yanchor": "top"},
    )
    return fig


def _add_run(
    fig: go.Figure,
    axis: StepAxis,
    part: pd.DataFrame,
    run: str,
    style: tuple[str, str],
    row: int,
    shown: set[str],
) -> None:
    """One run's curve (`style`: which accuracy column, which colour), its phase-2 onset and its
    baseline in one panel.
    """
    values, colour = style
    epochs = part["epoch"].tolist()
    fig.add_trace(
        go.Scatter(
            **axis.trace(epochs),
            y=part[values].tolist(),
            name=run,
            legendgroup=run,
            showlegend=row == 1,
            mode="lines",
            line={"color": colour, "width": 1.5},
            hovertemplate=f"{run}<br>epoch %{{customdata:,}}<br>held-out accuracy on {VALUE_SETS[values]} "
            "%{y:.3f}<extra></extra>",
        ),
        row=row,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            **axis.trace(epochs),
            y=part["shuffled_high"].tolist(),
            name="permuted-label baseline (95th percentile)",
            legendgroup="baseline",
            showlegend=row == 1 and "baseline" not in shown,
            mode="lines",
            line={"color": "#bbb", "width": 1},
            hovertemplate=f"{run}: permuted labels<br>epoch %{{customdata:,}}<br>95th percentile %{{y:.3f}}"
            "<extra></extra>",
        ),
        row=row,
        col=1,
    )
    shown.add("baseline")
    onset = part["onset"].iloc[0]
    if not pd.isna(onset):
        # On the drawn line: interpolated in the axis's own (log) coordinate.
        x = np.log10(axis.positions(epochs))
        y = float(np.interp(np.log10(axis.shape_x(int(onset))), x, part[values].to_numpy()))
        fig.add_trace(
            go.Scatter(
                **axis.trace([int(onset)]),
                y=[y],
                mode="markers",
                marker={
                    "symbol": "diamond",
                    "size": 10,
                    "color": colour,
                    "line": {"color": "#000", "width": 1},
                },
                name=run,
                legendgroup=run,
                showlegend=False,
                hovertemplate=f"{run}<br>phase-2 onset, epoch %{{customdata:,}}<extra></extra>",
            ),
            row=row,
            col=1,
        )
