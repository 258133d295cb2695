"""The LLC curve and its stage boundaries on study A's circuit-evolution axes.

When a run has an LLC evolve table (whole-model `llc` results cached per checkpoint by
``evolve(run, "llc")`` or ``interp evolve --analysis llc``, or a table given directly), the
circuit-evolution figure gets one more panel, the LLC with ± 2 standard errors over chains, and
the boundaries `interp.stages.find_stages` finds in it (critical points and plateaus of the
smoothed curve, ``method="llc"``) are drawn as lines through every panel, so each stage lines up
with the accuracies, gradients and head measures above it. Phase 2 stays marked by
`interp.metrics.find_rise` (unchanged), so a reader sees both onsets side by side.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from analyses.base import RESULT_FILE
from analyses.report.plots import StepAxis, add_step_marker
from interp.stages import find_stages

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.stages import Stages

LLC_ANALYSIS, ANALYSES_FOLDER = "llc", "analyses"
BOUNDARY_COLOUR = "#d62728"
MIN_EVALUATIONS = 3  # find_stages needs at least three evaluations


def cached_llc(run_dir: str | Path, cache: str | Path | None = None) -> pd.DataFrame | None:
    """The run's LLC evolve table from its cache: one row per checkpoint (``step``, ``llc``, ``se``).

    Reads the whole-model `llc` results cached under `cache` (a report's ``OUT/cache/RUN``) or,
    if it holds none, the run's own ``RUN/analyses``, where `interp evolve --run RUN --analysis
    llc` caches them: an LLC computed before the report is drawn by it. Results at the default
    settings (``llc/step_N``) and any other (``llc/SETTINGS/step_N``,
    `analyses.evolution.settings_folder`); where several settings were cached, those of the most
    checkpoints (a curve mixes no settings).
    None when fewer than three checkpoints have one.
    """
    own = Path(run_dir) / ANALYSES_FOLDER
    if cache is not None and Path(cache) != own:
        found = _cached_llc(Path(cache) / LLC_ANALYSIS)
        return found if found is not None else _cached_llc(own / LLC_ANALYSIS)
    return _cached_llc(own / LLC_ANALYSIS)


def _cached_llc(root: Path) -> pd.DataFrame | None:
    """`cached_llc` in one cache folder (``.../llc``)."""
    rows = []
    for path in sorted(root.glob(f"**/step_*/{RESULT_FILE}")):
        try:
            fields = json.loads(path.read_text())["fields"]
        except (OSError, ValueError, KeyError):
            continue  # a half-written cache entry: evolve recomputes it, the figure skips it
        params = fields.get("params") or {}
        if params.get("restrict") or fields.get("step") is None:
            continue
        key = json.dumps(params, sort_keys=True)
        rows.append({"step": int(fields["step"]), "llc": fields["estimate"], "se": fields["se"], "key": key})
    if not rows:
        return None
    common, _ = Counter(r["key"] for r in rows).most_common(1)[0]
    table = pd.DataFrame([r for r in rows if r["key"] == common]).drop(columns="key").sort_values("step")
    return table.reset_index(drop=True) if len(table) >= MIN_EVALUATIONS else None


def llc_stages(table: pd.DataFrame) -> Stages:
    """The stage boundaries of an LLC evolve table (``step``, ``llc`` columns) by its critical
    points and plateaus (`interp.stages.find_stages`, ``method="llc"``, default smoothing).
    """
    return find_stages(table, ["llc"], method="llc")


def add_llc_panel(fig: go.Figure, axis: StepAxis, table: pd.DataFrame, row: int, rows: int) -> Stages:
    """The LLC (± 2 se) in `row`, and its stage boundaries as lines through rows 1..`rows`.

    Returns:
        The stages drawn (`llc_stages`).
    """
    import plotly.graph_objects as go

    stages = llc_stages(table)
    frame = table.groupby("step")[["llc", "se"]].mean().reset_index()
    steps = [int(s) for s in frame["step"]]
    fig.add_trace(
        go.Scatter(
            **axis.trace(steps),
            y=frame["llc"],
            error_y={"type": "data", "array": 2 * frame["se"], "thickness": 1},
            mode="lines+markers",
            name="LLC (whole model)",
            legend="legend4",
            line={"color": "#222222"},
            hovertemplate="epoch %{customdata:,}<br>LLC %{y:.4g}<extra></extra>",
        ),
        row=row,
        col=1,
    )
    if stages.smoothed is not None:
        fig.add_trace(
            go.Scatter(
                **axis.trace(stages.steps), y=stages.smoothed, mode="lines", name="LLC, smoothed",
                legend="legend4", line={"color": "#888888", "dash": "dash"}, hoverinfo="skip",
            ),
            row=row, col=1,
        )  # fmt: skip
    for index, (step, kind) in enumerate(zip(stages.boundaries, stages.kinds)):
        # Labelled in the LLC panel, staggered downwards: boundaries can sit a checkpoint apart.
        add_step_marker(
            fig, axis, step, f"LLC {kind}: new stage at epoch {step:,}", rows=rows, label_row=row,
            colour=BOUNDARY_COLOUR, label_y=1.0 - 0.12 * (index % 3),
        )  # fmt: skip
    fig.update_yaxes(title_text="LLC", row=row)
    return stages


def boundary_steps(fig: go.Figure) -> list[Any]:
    """The x of every LLC boundary line in `fig` (data units), for tests and readers of a figure."""
    return sorted({s.x0 for s in fig.layout.shapes if s.x0 == s.x1 and s.line.color == BOUNDARY_COLOUR})
