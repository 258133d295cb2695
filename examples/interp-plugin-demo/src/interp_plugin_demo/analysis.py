"""`demo-norms`: the Frobenius norm of every weight matrix of a model (any kind).

The smallest useful analysis: a frozen `Params`, a pure `compute(subject, params) -> Result`,
and a `Result` with `to_frame()` and `figure()`, registered by its entry point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go

from analyses.base import Analysis, Result, param
from interp.config import to_dict


@dataclass(frozen=True)
class Params:
    """Parameters of `demo-norms`."""

    biases: bool = param(False, "Also list biases and LayerNorm weights (one-dimensional tensors).")


@dataclass(frozen=True)
class NormsResult(Result):
    """One Frobenius norm per parameter tensor (parallel lists).

    Attributes:
        tensor: Parameter name (TransformerLens names, e.g. ``blocks.0.attn.W_Q``).
        norm: Its Frobenius norm.
    """

    analysis: ClassVar[str] = "demo-norms"
    tensor: list[str]
    norm: list[float]

    def to_frame(self) -> pd.DataFrame:
        """One row per tensor."""
        return pd.DataFrame({"tensor": self.tensor, "norm": self.norm})

    def figure(self) -> go.Figure:
        """Bars of the norm per tensor."""
        step = "" if self.step is None else f", step {self.step}"
        fig = go.Figure(
            go.Bar(x=self.tensor, y=self.norm, hovertemplate="%{x}<br>norm %{y:.3f}<extra></extra>")
        )
        return fig.update_layout(
            title=f"Weight norms{step}", xaxis_title="parameter", yaxis_title="Frobenius norm"
        )


def compute(subject, params: Params) -> NormsResult:  # noqa: ANN001 - an analyses.subject.Subject
    """The norm of each parameter of `subject.model` (matrices only unless `params.biases`)."""
    rows = [
        (name, float(p.detach().norm()))
        for name, p in subject.model.named_parameters()
        if params.biases or p.ndim > 1
    ]
    return NormsResult(
        params=to_dict(params), step=subject.step, tensor=[r[0] for r in rows], norm=[r[1] for r in rows]
    )


ANALYSIS = Analysis(
    name="demo-norms",
    summary="Frobenius norm of every weight matrix (a worked plugin analysis).",
    params=Params,
    compute=compute,
    result=NormsResult,
    models=("transformer", "quadratic_mlp"),
    definition="The Frobenius norm sqrt(sum w^2) of each parameter tensor.",
)
