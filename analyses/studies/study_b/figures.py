"""Study B's comparisons and figures: forgetting curves, walks, effective ranks, cosines.

Each reads ordinary run folders or checkpoints (`analyses.studies.study_b.protocol` writes
them) or a walk's records, and returns a plotly figure or a frame:
`forgetting_figure` (original-task and noise accuracy during injection), `walk_figure` (each
walk's cosine to its start, flatness and ln f), `rank_frame` / `rank_figure` (whole-layer
effective ranks) and `cosine_frame` (how far a model moved between two checkpoints).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from analyses.drift import DriftResult
from analyses.drift import Params as DriftParams
from analyses.drift import compute as drift
from analyses.rank import Params as RankParams
from analyses.rank import compute as rank
from analyses.subject import load_subject
from interp.store.run_folder import read_metrics


def forgetting_figure(runs: Mapping[str, str | Path]) -> go.Figure:
    """Original-task test accuracy (solid) and noise accuracy (dotted) vs fine-tuning step."""
    fig = go.Figure()
    for label, run in runs.items():
        records = read_metrics(run)
        steps = [r["step"] for r in records]
        fig.add_scatter(
            x=steps, y=[r["test/acc"] for r in records], name=f"{label}: original test acc", mode="lines"
        )
        fig.add_scatter(
            x=steps,
            y=[r.get("train/noise/acc") for r in records],
            name=f"{label}: noise acc",
            mode="lines",
            line={"dash": "dot"},
        )
    fig.update_layout(
        title="Noise injection: original-task test accuracy (split 'test') and noise memorisation",
        xaxis_title="fine-tuning step",
        yaxis_title="accuracy",
        yaxis_range=[0, 1.02],
    )
    return fig


def walk_figure(
    walks: Mapping[str, Sequence[Mapping[str, Any]]],
    target_cosine: float | None = None,
    target_flatness: float | None = None,
    target_ln_f: float | None = None,
) -> go.Figure:
    """How far each walk got: its records (`walk_records`, one per chunk) against the entropy step.

    Three panels share the step axis:

    * each walker's cosine to its own start, with the target the walk stops at (dashed);
    * the histogram's flatness (min / mean over visited bins; log scale), with the target a
      sample must reach to count as an equilibrium sample;
    * the Wang-Landau factor ln f (log scale), with the value a classic schedule's walk must
      halve it to.

    Where a walk stalls is then visible at a glance: a flatness that never rises while ln f
    falls means the walker stayed in a few bins (the hover gives their count).

    Args:
        walks: A label (e.g. ``"seed 0"``) -> that walk's records.
        target_cosine: Drawn as a dashed line on the cosine panel when given.
        target_flatness: Likewise on the flatness panel.
        target_ln_f: Likewise on the ln f panel (``ln_f0 / 2 ** target_halvings``).

    Returns:
        The figure.
    """
    from plotly.subplots import make_subplots

    from analyses.report.plots import HEAD_PALETTE

    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("cosine to the walk's start", "flatness of the histogram", "ln f"),
    )
    for i, (label, records) in enumerate(walks.items()):
        _add_walk(fig, label, records, HEAD_PALETTE[i % len(HEAD_PALETTE)])
    if not any(r["flatness"] > 0 for records in walks.values() for r in records):
        fig.add_annotation(
            text="flatness 0 at every record: a bin it counts has not been visited yet",
            x=0.5,
            xref="x domain",
            y=0.5,
            yref="y2 domain",
            showarrow=False,
            row=2,
            col=1,
        )
    for row, target, log in ((1, target_cosine, False), (2, target_flatness, True), (3, target_ln_f, True)):
        if target is not None:
            _add_target(fig, row, target, log)
    fig.update_yaxes(title_text="cosine", row=1, col=1)
    fig.update_yaxes(title_text="min / mean", type="log", exponentformat="power", row=2, col=1)
    fig.update_yaxes(title_text="ln f", type="log", exponentformat="power", row=3, col=1)
    fig.update_xaxes(title_text="entropy step", row=3, col=1)
    fig.update_layout(title="WLMD walks: distance from the start, flatness, ln f", height=800)
    return fig


def _add_walk(fig: go.Figure, label: str, records: Sequence[Mapping[str, Any]], colour: str) -> None:
    """One walk's traces on `walk_figure`'s panels: a cosine line per walker (dashed by walker),
    its flatness and its ln f, in one colour and one legend group.
    """
    steps = [r["step"] for r in records]
    walkers = len(records[0]["cosine"]) if records else 0
    for w in range(walkers):
        name = label if walkers == 1 else f"{label}, walker {w}"
        fig.add_scatter(
            x=steps,
            y=[r["cosine"][w] for r in records],
            name=name,
            legendgroup=label,
            mode="lines",
            line={"color": colour, "dash": ("solid", "dot", "dash", "dashdot")[w % 4]},
            row=1,
            col=1,
        )
    same_walk = {"name": label, "legendgroup": label, "showlegend": False, "mode": "lines", "col": 1}
    # A chunk's flatness is 0 until a second bin is visited: log axes cannot show it.
    flat = [(s, r["flatness"], r["visited"]) for s, r in zip(steps, records) if r["flatness"] > 0]
    fig.add_scatter(
        x=[s for s, _, _ in flat],
        y=[f for _, f, _ in flat],
        customdata=[v for _, _, v in flat],
        hovertemplate="step %{x}: flatness %{y:.3g}, %{customdata} bins visited",
        line={"color": colour},
        row=2,
        **same_walk,
    )
    fig.add_scatter(x=steps, y=[r["ln_f"] for r in records], line={"color": colour}, row=3, **same_walk)


def _add_target(fig: go.Figure, row: int, target: float, log: bool) -> None:
    """A dashed line at `target` on `walk_figure`'s panel `row`, labelled at its right end."""
    fig.add_hline(y=target, line={"dash": "dash", "color": "#7f7f7f"}, row=row, col=1)
    # Annotations take log10 units on a log axis (`plots.StepAxis`), shapes data units.
    fig.add_annotation(
        text=f"target {target:g}",
        x=1,
        xref="x domain",
        y=math.log10(target) if log else target,
        yanchor="bottom",
        xanchor="right",
        showarrow=False,
        row=row,
        col=1,
    )


def rank_frame(models: Mapping[str, str | Path]) -> pd.DataFrame:
    """Whole-layer effective ranks (head -1 rows) of each labelled checkpoint, one column each."""
    columns = {}
    for label, path in models.items():
        frame = rank(load_subject(path), RankParams(per_head=False)).to_frame()
        columns[label] = frame.set_index(["matrix", "layer"])["effective_rank"]
    return pd.DataFrame(columns).reset_index()


def rank_figure(models: Mapping[str, str | Path]) -> go.Figure:
    """Grouped bars of `rank_frame` (e.g. AdamW / WLMD, before / after injection)."""
    frame = rank_frame(models)
    fig = go.Figure()
    for label in models:
        fig.add_bar(
            x=[f"{m} L{layer}" if layer >= 0 else m for m, layer in zip(frame["matrix"], frame["layer"])],
            y=frame[label],
            name=label,
        )
    fig.update_layout(
        barmode="group",
        title="Effective rank (Roy-Vetterli), whole-layer matrices",
        xaxis_title="matrix, layer",
        yaxis_title="effective rank",
    )
    return fig


def cosine_frame(pairs: Mapping[str, tuple[str | Path, str | Path]]) -> pd.DataFrame:
    """Total cosine and distance between `before` and `after` checkpoints, one row per label."""
    rows = []
    for label, (before, after) in pairs.items():
        result: DriftResult = drift(load_subject(after), DriftParams(reference=str(before)))
        rows.append(
            {
                "model": label,
                "cosine": result.total,
                "distance": result.distance,
                "norm_before": result.reference_norm,
                "norm_after": result.norm,
            }
        )
    return pd.DataFrame(rows)
