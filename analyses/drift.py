"""`drift`: cosine between a checkpoint's parameters and a reference checkpoint's (study B).

Study B compares each model before and after noise injection: the WLMD model's parameters
move *more* (lower cosine) yet it keeps the task. Tensors are matched by name; when the
vocabulary was extended (`models.vocab`), `W_E` / `W_U` / `b_U` are compared on their original
rows / columns only (`interp.dissect.weights.parameter_cosine`).

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
from interp.dissect.weights import parameter_cosine
from interp.errors import ConfigError
from interp.store import load_checkpoint
from interp.store.checkpoint import Checkpoint
from interp.store.handle import RunHandle


@dataclass(frozen=True)
class Params:
    """Parameters of `drift`."""

    reference: str = param(
        "", "Reference checkpoint or run folder (empty: the first checkpoint of the analysed run)."
    )


@dataclass(frozen=True)
class DriftResult(Result):
    """Cosine to the reference, in total and per tensor.

    Attributes:
        reference: The reference checkpoint folder.
        reference_step: Its step.
        total: Cosine of the concatenated parameters (overlapping slices).
        distance: L2 distance over the overlapping slices.
        norm: Norm of the analysed parameters (overlapping slices); `reference_norm` likewise.
        tensor: Tensor names; `cosine`: their cosines (parallel lists).
        sliced: Tensors compared on an overlapping slice (shapes differed).
    """

    analysis: ClassVar[str] = "drift"
    reference: str
    reference_step: int
    total: float | None
    distance: float
    norm: float
    reference_norm: float
    tensor: list[str]
    cosine: list[float | None]
    sliced: list[str]

    def to_frame(self) -> pd.DataFrame:
        """One row for the total, then one per tensor."""
        return pd.DataFrame(
            {
                "tensor": ["<total>", *self.tensor],
                "cosine": [self.total, *self.cosine],
                "sliced": [False, *(t in self.sliced for t in self.tensor)],
            }
        )

    def figure(self) -> go.Figure:
        """Bars of the cosine per tensor, the total first."""
        frame = self.to_frame()
        fig = go.Figure(
            go.Bar(
                x=frame["tensor"], y=frame["cosine"], hovertemplate="%{x}<br>cosine %{y:.4f}<extra></extra>"
            )
        )
        step = "" if self.step is None else f"step {self.step}"
        fig.update_layout(
            title=f"Parameter cosine: {step} vs reference step {self.reference_step}",
            xaxis_title="tensor",
            yaxis_title="cosine",
            yaxis_range=[-1.05, 1.05],
        )
        return fig


def _reference(subject: Subject, params: Params) -> Checkpoint:
    """`params.reference`, else the first checkpoint of the subject's run (through its handle:
    over a whole run, `evolve` then reads the run's config once).
    """
    if params.reference:
        return load_checkpoint(params.reference, load_train_state=False)
    if subject.run is None and subject.source is None:
        raise ConfigError("drift needs --reference when the subject does not come from a checkpoint")
    run = subject.run or RunHandle.open(subject.source)
    return run.load_checkpoint(run.steps[0])


def compute(subject: Subject, params: Params) -> DriftResult:
    """Cosine between `subject.model` and the reference checkpoint."""
    ref = _reference(subject, params)
    drift = parameter_cosine(subject.model.state_dict(), ref.state_dict)
    return DriftResult(
        params=to_dict(params),
        step=subject.step,
        reference=str(ref.path),
        reference_step=ref.step,
        total=drift.total,
        distance=drift.distance,
        norm=drift.norm_a,
        reference_norm=drift.norm_b,
        tensor=list(drift.per_tensor),
        cosine=list(drift.per_tensor.values()),
        sliced=drift.sliced,
    )


ANALYSIS = Analysis(
    name="drift",
    summary=REGISTRY["drift"][1],
    params=Params,
    compute=compute,
    result=DriftResult,
)
