"""Study A's answer in one figure: the rule rate at r = 0.5 and 0.9, per model and weight decay.

Drawn from the committed records of the grids that test the contrast (`GRIDS`: the headline at
weight decay 0.1, the weight-decay headline at 0.4, the replication at 0.1, and stage (b)'s
weight-decay cell, five seeds paired with the headline's first five), each rate over its
finished runs with its Wilson 95% interval (`stats.axis_rates`). A grid still training shows
its finished runs and says how many of its runs that is; a grid not committed yet is left out.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from analyses.report.records import load_results
from analyses.studies.study_a.decision import RESULTS
from analyses.studies.study_a.stats import axis_rates

GRIDS = {
    "headline": "headline",
    "wd-headline": "weight-decay headline",
    "replication": "replication",
    "wd": "stage (b), headline seeds 0-4",
}
"""The grids drawn (folders below `RESULTS`), each with its name in the legend."""
MARKERS = {"wd": "diamond", "replication": "square"}
"""A grid's marker where its line shares a colour with another grid's (same model and weight decay)."""

MODELS = {"mpsp-2l2h": "two layers", "mpsp-1l1h": "one layer"}
COLOURS = {("mpsp-2l2h", 0.1): "#1f77b4", ("mpsp-2l2h", 0.4): "#17becf", ("mpsp-1l1h", 0.1): "#d62728"}
COLOURS[("mpsp-1l1h", 0.4)] = "#ff7f0e"


def rule_rates(results: str | Path = RESULTS) -> pd.DataFrame:
    """One row per grid, model and r: the rule's rate over finished runs, its Wilson interval, and
    the weight decay, the grid's label and how many of its runs have finished.
    """
    frames = []
    for name, label in GRIDS.items():
        folder = Path(results) / name
        if not (folder / "sweep.json").is_file():
            continue
        runs = load_results(folder)[1]
        rates = axis_rates(runs, "r")
        rates = rates[rates["line"].isin(list(MODELS))]
        frames.append(
            rates.rename(columns={"line": "preset"}).assign(
                grid=name,
                label=label,
                weight_decay=runs[0].spec.train["weight_decay"],
                runs=len(runs),
                grid_finished=sum(r.status == "finished" for r in runs),
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def rule_rate_figure(results: str | Path = RESULTS) -> go.Figure:
    """The rule rate (%) against r, one line per grid and model (Wilson 95% bars; weight decay
    0.4 dashed); the lines are nudged apart along r so their bars do not hide each other.
    """
    table = rule_rates(results)
    fig = go.Figure()
    groups = list(table.groupby(["grid", "preset"], sort=False)) if len(table) else []
    for i, ((grid, preset), rows) in enumerate(groups):
        rows = rows[rows["finished"] > 0].sort_values("r")
        first = rows.iloc[0] if len(rows) else None
        if first is None:
            continue
        wd = float(first["weight_decay"])
        state = (
            ""
            if first["grid_finished"] == first["runs"]
            else f", {first['grid_finished']} of {first['runs']} runs finished"
        )
        name = f"{MODELS[preset]}, weight decay {wd:g} ({first['label']}{state})"
        rate = 100 * rows["rate"]
        fig.add_scatter(
            x=rows["r"] + 0.012 * (i - (len(groups) - 1) / 2),
            y=rate,
            mode="lines+markers",
            name=name,
            line={"color": COLOURS[(preset, wd)], "dash": "dash" if wd == 0.4 else "solid"},
            marker={"symbol": MARKERS.get(grid, "circle"), "size": 9},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": 100 * rows["ci_high"] - rate,
                "arrayminus": rate - 100 * rows["ci_low"],
            },
            customdata=rows[["r", "reached", "finished"]].to_numpy(),
            hovertemplate=f"{name}<br>r = %{{customdata[0]}}: the rule in %{{customdata[1]}} of "
            "%{customdata[2]} finished runs = %{y:.0f}%<extra></extra>",
        )
    fig.update_xaxes(title_text="spurious ratio r (the shortcut agrees with the label)", tickvals=[0.5, 0.9])
    fig.update_yaxes(title_text="runs that reached the rule (%)", range=[-5, 105])
    fig.update_layout(
        # Two lines: on one, the title ran under the toolbar plotly draws at the top right.
        title="Rule rate per model and weight decay<br><sup>at r = 0.5 and 0.9; bars: Wilson 95% intervals</sup>",
        height=500,
        # Below the axes: the names are long, and beside them they would squeeze the plot.
        legend={"title": {"text": "model, weight decay (grid)"}, "yanchor": "top", "y": -0.2, "x": 0},
        # A small top margin: the figure opens the page's first screen, under the answer.
        margin={"t": 70, "b": 10},
    )
    return fig
