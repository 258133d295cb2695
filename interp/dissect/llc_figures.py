"""Tables and figures of LLC chains (`interp.dissect.learning_coefficient`; the `llc` analysis)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from interp.dissect.chain_health import FLAG_TEXT, Health

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go


def chain_frame(per_chain: list[float], losses: np.ndarray, health: Health) -> pd.DataFrame:
    """One row per chain: its estimate, mean and last sampled loss; the shared diagnostics
    (R-hat, ESS, drift, flags) repeated on every row so any one row says how far to trust it.
    """
    import pandas as pd

    return pd.DataFrame(
        {
            "chain": range(len(per_chain)),
            "llc": per_chain,
            "mean_loss": losses.mean(axis=1),
            "last_loss": losses[:, -1],
            "rhat": health.rhat,
            "ess": health.ess,
            "drift": health.drift,
            "flags": ",".join(health.flags) or "ok",
        }
    )


def checkpoint_frame(table: pd.DataFrame) -> pd.DataFrame:
    """One row a checkpoint of an `evolve` table of the `llc` analysis (a row a chain and
    checkpoint, each repeating its checkpoint's estimate, standard error and flags): ``step``,
    ``estimate``, ``se`` and ``flags`` ("" for a healthy estimate, which `chain_frame` marks "ok";
    a table read back from CSV may hold NaN there), by step.
    """
    columns = [c for c in ("estimate", "se", "flags") if c in table.columns]
    out = table.groupby("step")[columns].first().reset_index()
    if "flags" in out.columns:  # object first: a column of NaN only is read back as float
        out["flags"] = out["flags"].astype(object).fillna("").astype(str).replace("ok", "")
    return out


def running_estimate(losses: np.ndarray, init_loss: float, n_beta: float) -> np.ndarray:
    """``n_beta * (mean of the first t draws - L_n(w*))``, mean over chains, for each t: ``[draws]``."""
    counts = np.arange(1, losses.shape[1] + 1)
    return n_beta * (np.cumsum(losses, axis=1) / counts - init_loss).mean(axis=0)


def llc_figure(
    losses: np.ndarray,
    init_loss: float,
    n_beta: float,
    estimate: float,
    se: float,
    title: str,
    health: Health | None = None,
) -> go.Figure:
    """Two panels over the draws: each chain's ``n_beta * (L - L_n(w*))`` and the running
    estimate, with the final estimate +- 2 standard errors as a band; the flags in the title.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    draws = np.arange(losses.shape[1])
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("per-chain n·β·(L − L(w*)) per draw", "running estimate over draws")
    )
    for c, trace in enumerate(n_beta * (losses - init_loss)):
        fig.add_trace(
            go.Scatter(
                x=draws, y=trace, mode="lines", name=f"chain {c}", line={"width": 1},
                hovertemplate=f"chain {c}<br>draw %{{x}}<br>n·β·(L − L(w*)) %{{y:.4g}}<extra></extra>",
            ),
            row=1, col=1,
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=draws, y=running_estimate(losses, init_loss, n_beta), mode="lines", name="running estimate",
            line={"color": "black"}, hovertemplate="draw %{x}<br>estimate %{y:.4g}<extra></extra>",
        ),
        row=1, col=2,
    )  # fmt: skip
    fig.add_hrect(
        y0=estimate - 2 * se, y1=estimate + 2 * se, fillcolor="grey", opacity=0.2, line_width=0, row=1, col=2
    )
    fig.add_hline(
        y=estimate, line_dash="dash", row=1, col=2, annotation_text=f"LLC {estimate:.4g} ± {se:.2g} (se)"
    )
    flags = "" if health is None else "; flags: " + (", ".join(health.flags) or "none")
    fig.update_layout(
        title=f"{title}LLC {estimate:.4g} ± {se:.2g} (se over chains){flags}", hovermode="closest"
    )
    fig.update_xaxes(title_text="draw (after burn-in)")
    fig.update_yaxes(title_text="n·β·(L − L(w*))", row=1, col=1)
    fig.update_yaxes(title_text="LLC estimate", row=1, col=2)
    return fig


def flag_lines(health: Health) -> list[str]:
    """One line per raised flag, saying what it means."""
    return [f"{flag}: {FLAG_TEXT[flag]}" for flag in health.flags]
