"""`rank`: Roy-Vetterli effective rank of every attention and MLP matrix (study B).

One row per matrix: `W_Q`, `W_K`, `W_V`, `W_O` per head and concatenated over heads (head -1),
`W_QK` and `W_OV` per head (FactoredMatrix singular values), `W_in`, `W_out`, `W_E`, `W_U`.
Study B: the WLMD equilibrium model has clearly higher effective ranks than the AdamW one,
before and after noise injection; both lose rank after. Definition: `interp.dissect.weights`.

Wraps `interp.dissect.weights` (the table in docs/architecture.md pairs every dissection module with
the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.weights import transformer_ranks
from interp.errors import ConfigError


@dataclass(frozen=True)
class Params:
    """Parameters of `rank`."""

    per_head: bool = param(True, "Also list per-head matrices (off: only whole-layer rows, head -1).")


@dataclass(frozen=True)
class RankResult(Result):
    """Effective ranks, one entry per matrix (parallel lists).

    Attributes:
        matrix: Matrix name (`W_Q`, ..., `W_QK`, `W_OV`, `W_in`, `W_out`, `W_E`, `W_U`).
        layer: Layer (-1 for embeddings).
        head: Head (-1: concatenated over heads, or not a per-head matrix).
        effective_rank: exp(entropy of the normalised singular values).
        max_rank: min(rows, columns).
    """

    analysis: ClassVar[str] = "rank"
    matrix: list[str]
    layer: list[int]
    head: list[int]
    effective_rank: list[float]
    max_rank: list[int]

    def to_frame(self) -> pd.DataFrame:
        """One row per matrix."""
        return pd.DataFrame(
            {
                "matrix": self.matrix,
                "layer": self.layer,
                "head": self.head,
                "effective_rank": self.effective_rank,
                "max_rank": self.max_rank,
            }
        )

    def figure(self) -> go.Figure:
        """Bars of effective rank per matrix (x: L<layer>H<head> name; 'all' = concatenated)."""
        frame = self.to_frame()
        labels = [
            f"{r.matrix} L{r.layer}" + ("" if r.head < 0 else f"H{r.head}") if r.layer >= 0 else r.matrix
            for r in frame.itertuples()
        ]
        fig = go.Figure(
            go.Bar(
                x=labels,
                y=frame["effective_rank"],
                customdata=frame[["layer", "head", "max_rank"]].to_numpy(),
                hovertemplate="%{x}<br>layer %{customdata[0]}, head %{customdata[1]} (-1: all)"
                "<br>effective rank %{y:.2f} of max %{customdata[2]}<extra></extra>",
            )
        )
        step = "" if self.step is None else f", step {self.step}"
        fig.update_layout(
            title=f"Effective rank (Roy-Vetterli){step}",
            xaxis_title="matrix, layer L, head H",
            yaxis_title="effective rank",
        )
        return fig


def compute(subject: Subject, params: Params) -> RankResult:
    """Effective ranks of `subject.model` (a transformer)."""
    if not hasattr(subject.model, "blocks"):
        raise ConfigError(
            f"rank needs a transformer with attention heads, not {type(subject.model).__name__}"
        )
    rows = [r for r in transformer_ranks(subject.model) if params.per_head or r.head < 0]
    return RankResult(
        params=to_dict(params),
        step=subject.step,
        matrix=[r.matrix for r in rows],
        layer=[r.layer for r in rows],
        head=[r.head for r in rows],
        effective_rank=[r.effective_rank for r in rows],
        max_rank=[r.max_rank for r in rows],
    )


ANALYSIS = Analysis(
    name="rank",
    summary=REGISTRY["rank"][1],
    params=Params,
    compute=compute,
    result=RankResult,
)
