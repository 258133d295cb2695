"""`llc-calibrate`: sweep step size x n_beta on one checkpoint; recommend the setting for a series.

Every cell is a full `llc` estimate with its chains' health (`interp.dissect.chain_health`), as
devinterp's epsilon-beta analysis sweeps them, and the table and heatmap show the estimate,
its standard error and the raised flags per cell. The recommendation, by one stated rule:

* among the cells with no flag raised, those at the n_beta closest (in log) to ``n / log n``
  (WBIC's temperature, `llc`'s default), and of those the **largest step size** (it mixes
  fastest at a fixed number of draws; a step too large shows as ``diverged``, ``nan`` or an
  R-hat flag, and is not healthy);
* if no cell is healthy, the cell with the fewest flags (ties: the smaller step size), marked
  ``healthy: false`` so that nothing downstream mistakes it for a calibrated setting.

Calibrate on the checkpoint of the series hardest to sample (usually the last, the sharpest
minimum), then pass the result folder as `llc --calibration FOLDER`: each estimate records the
calibration it used.

Wraps `interp.dissect.learning_coefficient` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pandas as pd
import plotly.graph_objects as go

from analyses.base import Analysis, Result
from analyses.llc import estimate
from analyses.llc_params import CalibrateParams, n_beta_values, step_size_values
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.learning_coefficient import default_n_beta


@dataclass(frozen=True)
class CalibrateResult(Result):
    """One `llc` estimate per (step size, n_beta) cell, and the recommended cell.

    Attributes:
        step_size, n_beta: Each cell's settings (parallel lists, step size varying fastest).
        estimate, se: Each cell's estimate and its standard error over chains.
        rhat, ess, drift: Each cell's diagnostics.
        flags: Each cell's raised flags, comma-joined ("" when healthy).
        default_n_beta: n / log n over the split.
        recommended: ``{"step_size", "n_beta", "estimate", "se", "healthy", "rule"}``.
    """

    analysis: ClassVar[str] = "llc-calibrate"
    step_size: list[float]
    n_beta: list[float]
    estimate: list[float]
    se: list[float]
    rhat: list[float | None]
    ess: list[float | None]
    drift: list[float]
    flags: list[str]
    default_n_beta: float
    recommended: dict[str, Any]

    def to_frame(self) -> pd.DataFrame:
        """One row per cell; `recommended` marks the chosen one."""
        frame = pd.DataFrame(
            {
                "step_size": self.step_size,
                "n_beta": self.n_beta,
                "estimate": self.estimate,
                "se": self.se,
                "rhat": self.rhat,
                "ess": self.ess,
                "drift": self.drift,
                "flags": [f or "ok" for f in self.flags],
            }
        )
        chosen = (frame["step_size"] == self.recommended["step_size"]) & (
            frame["n_beta"] == self.recommended["n_beta"]
        )
        return frame.assign(recommended=chosen)

    def summary(self) -> str:
        """The choice in one sentence: whether any cell was healthy, the rule, the setting used."""
        best = self.recommended
        health = "Some cells were healthy" if best["healthy"] else "No cell was healthy (every cell flagged)"
        return (
            f"{health}; by the calibration's rule ({best['rule']}) the setting used is step size "
            f"{best['step_size']:g} at n_beta {best['n_beta']:.1f}."
        )

    def figure(self) -> go.Figure:
        """Heatmap of the estimate over step size (x) and n_beta (y); each cell's text gives the
        estimate ± se and its flags; the recommended cell is outlined.
        """
        frame = self.to_frame()
        xs, ys = sorted(set(self.step_size)), sorted(set(self.n_beta))
        z = [[None] * len(xs) for _ in ys]
        text = [[""] * len(xs) for _ in ys]
        for row in frame.itertuples():
            i, j = ys.index(row.n_beta), xs.index(row.step_size)
            z[i][j] = row.estimate if math.isfinite(row.estimate) else None
            text[i][j] = f"{row.estimate:.3g} ± {row.se:.2g}<br>{row.flags}"
        labels_x, labels_y = [f"{x:.3g}" for x in xs], [f"{y:.4g}" for y in ys]
        fig = go.Figure(
            go.Heatmap(
                x=labels_x, y=labels_y, z=z, text=text, texttemplate="%{text}", colorscale="Viridis",
                colorbar={"title": "LLC"},
                hovertemplate="step size %{x}<br>n·β %{y}<br>%{text}<extra></extra>",
            )
        )  # fmt: skip
        best = self.recommended
        fig.add_shape(
            type="rect", xref="x", yref="y", line={"color": "red", "width": 3},
            x0=xs.index(best["step_size"]) - 0.5, x1=xs.index(best["step_size"]) + 0.5,
            y0=ys.index(best["n_beta"]) - 0.5, y1=ys.index(best["n_beta"]) + 0.5,
        )  # fmt: skip
        healthy = "healthy" if best["healthy"] else "NO healthy cell: fewest flags"
        step = "" if self.step is None else f" at step {self.step}"
        fig.update_layout(
            title=f"LLC calibration{step}: recommended step size {best['step_size']:.3g}, n·β {best['n_beta']:.4g} "
            f"({healthy}; n/log n = {self.default_n_beta:.4g})",
            xaxis={"title": "step size ε", "type": "category"},
            yaxis={"title": "n·β", "type": "category"},
        )
        return fig


RULE = "healthy cells at the n_beta closest to n/log n, then the largest step size; else fewest flags"


def recommend(cells: list[dict[str, Any]], default: float) -> dict[str, Any]:
    """The recommended cell by `RULE` (see the module docstring)."""
    healthy = [c for c in cells if not c["flags"]]
    if healthy:
        closest = min(abs(math.log(c["n_beta"] / default)) for c in healthy)
        near = [c for c in healthy if abs(math.log(c["n_beta"] / default)) <= closest + 1e-12]
        best = max(near, key=lambda c: c["step_size"])
    else:
        best = min(cells, key=lambda c: (len(c["flags"].split(",")), c["step_size"]))
    keys = ("step_size", "n_beta", "estimate", "se")
    return {**{k: best[k] for k in keys}, "healthy": bool(healthy), "rule": RULE}


def compute(subject: Subject, params: CalibrateParams) -> CalibrateResult:
    """An `llc` estimate in every cell of the grid, and the recommendation."""
    default = default_n_beta(len(subject.split(params.split)))
    base = replace(params, calibration="")
    cells = []
    for n_beta in n_beta_values(params.n_betas, default):
        for step_size in step_size_values(params.step_sizes):
            est = estimate(subject, base, step_size, n_beta)
            cells.append(
                dict(
                    step_size=step_size, n_beta=est.n_beta, estimate=est.estimate, se=est.se, rhat=est.health.rhat,
                    ess=est.health.ess, drift=est.health.drift, flags=",".join(est.health.flags),
                )
            )  # fmt: skip
    columns = {key: [c[key] for c in cells] for key in cells[0]}
    return CalibrateResult(
        params=to_dict(params),
        step=subject.step,
        **columns,
        default_n_beta=default,
        recommended=recommend(cells, default),
    )


ANALYSIS = Analysis(
    name="llc-calibrate",
    summary=REGISTRY["llc-calibrate"][1],
    params=CalibrateParams,
    compute=compute,
    result=CalibrateResult,
    models=("transformer", "quadratic_mlp"),
    definition="An llc estimate with its health flags in every cell of a step size x n_beta grid; the "
    "recommendation is the healthy cell at the n_beta closest to n / log n with the largest step size.",
    reference="Lau et al. (2023); devinterp's epsilon-beta calibration (Timaeus).",
)
