"""`ipr`: per-neuron inverse participation ratio of study C's quadratic MLP.

For hidden neuron k, the input weights over the p number tokens (`W_E_left[:p, k]` for the
first operand, `W_E_right[:p, k]` for the second) are Fourier transformed over Z_p; the DC term
is dropped and frequencies f and p - f are folded; the two operands' spectra are combined by
adding power per frequency; `IPR = sum_f (a_f / ||a||_2)^4` (`interp.dissect.fourier`). High IPR (-> 1):
a periodic, generalising neuron; low IPR (-> 1/48 for p = 97): a memorising one. Over training
(`interp evolve --run RUN --analysis ipr`) the distribution moves from low to high as the
network generalises. Supports only models with `W_E_left`, `W_E_right` and `W_U`.

Wraps `interp.dissect.fourier` (the table in docs/architecture.md pairs every dissection module with
the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.fourier import fourier_amplitudes, ipr, neuron_ipr
from interp.errors import ConfigError


@dataclass(frozen=True)
class Params:
    """Parameters of `ipr`."""

    drop_dc: bool = param(True, "Drop the constant (f = 0) Fourier component before computing the IPR.")
    fold: bool = param(True, "Merge frequencies f and p - f (one real sinusoid) by adding their power.")
    bins: int = param(40, "Histogram bins of the figure.")


@dataclass(frozen=True)
class IPRResult(Result):
    """Per-neuron IPRs, every tensor [d_hidden].

    Attributes:
        n_values: Number of input values Fourier transformed (p).
        ipr: Joint IPR of both operands' input weights (power added per frequency).
        ipr_left: IPR of `W_E_left[:p, k]` alone.
        ipr_right: IPR of `W_E_right[:p, k]` alone.
        ipr_out: IPR of the output weights `W_U[k, :]` over the p classes.
        frequency: Dominant (folded) frequency of the joint input spectrum.
        norm: L2 norm of the neuron's input weights (both operands), to spot dead neurons.
        bins: Histogram bins of the figure.
    """

    analysis: ClassVar[str] = "ipr"
    n_values: int
    bins: int
    ipr: Tensor
    ipr_left: Tensor
    ipr_right: Tensor
    ipr_out: Tensor
    frequency: Tensor
    norm: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per neuron."""
        return pd.DataFrame(
            {
                "neuron": range(len(self.ipr)),
                "ipr": self.ipr.tolist(),
                "ipr_left": self.ipr_left.tolist(),
                "ipr_right": self.ipr_right.tolist(),
                "ipr_out": self.ipr_out.tolist(),
                "frequency": self.frequency.tolist(),
                "norm": self.norm.tolist(),
            }
        )

    def figure(self) -> go.Figure:
        """Histogram of the per-neuron IPR (joint, left, right)."""
        fig = go.Figure()
        for name, values in (
            ("joint (both operands)", self.ipr),
            ("left operand", self.ipr_left),
            ("right operand", self.ipr_right),
        ):
            fig.add_histogram(
                x=values.tolist(),
                name=name,
                xbins={"start": 0, "end": 1, "size": 1 / self.bins},
                opacity=0.6,
                hovertemplate=f"{name}<br>IPR %{{x}}<br>%{{y}} neurons<extra></extra>",
            )
        step = "" if self.step is None else f", step {self.step}"
        flat = 1 / (self.n_values // 2)
        fig.add_vline(x=flat, line_dash="dot", annotation_text=f"flat spectrum 1/{self.n_values // 2}")
        fig.update_layout(
            barmode="overlay",
            title=f"Per-neuron Fourier IPR over Z_{self.n_values}{step}",
            xaxis_title="IPR (1 = one frequency)",
            yaxis_title="neurons",
            xaxis_range=[0, 1],
        )
        return fig


def input_weights(subject: Subject) -> tuple[Tensor, Tensor, Tensor, int]:
    """`(left, right, out, p)`: the quadratic MLP's weights restricted to the p number tokens.

    Raises:
        ConfigError: If the model is not a quadratic MLP (`W_E_left`, `W_E_right`, `W_U`).
    """
    model = subject.model
    if not all(hasattr(model, name) for name in ("W_E_left", "W_E_right", "W_U")):
        raise ConfigError(
            f"this analysis needs study C's quadratic MLP (W_E_left, W_E_right, W_U), not {type(model).__name__}",
            "train one with --preset quadratic-mlp",
        )
    # The classes are the p residues; input rows past p (the EQ token) are never operands.
    p = model.W_U.shape[1]
    return model.W_E_left[:p].detach(), model.W_E_right[:p].detach(), model.W_U.detach(), p


def compute(subject: Subject, params: Params) -> IPRResult:
    """Per-neuron Fourier IPR of `subject.model` (a quadratic MLP)."""
    if params.bins < 1:
        raise ConfigError(f"bins={params.bins} must be a positive integer")
    left, right, out, p = input_weights(subject)
    values = neuron_ipr([left, right], drop_dc=params.drop_dc, fold=params.fold)
    out_ipr = ipr(fourier_amplitudes(out.T, drop_dc=params.drop_dc, fold=params.fold))
    return IPRResult(
        params=to_dict(params),
        step=subject.step,
        n_values=p,
        bins=params.bins,
        ipr=values["joint"].float(),
        ipr_left=values["each"][0].float(),
        ipr_right=values["each"][1].float(),
        ipr_out=out_ipr.float(),
        frequency=values["frequency"].long(),
        norm=torch.cat([left, right]).norm(dim=0).float(),
    )


ANALYSIS = Analysis(
    name="ipr",
    summary=REGISTRY["ipr"][1],
    params=Params,
    compute=compute,
    result=IPRResult,
    models=("quadratic_mlp",),
)
