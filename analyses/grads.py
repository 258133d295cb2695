"""`grads`: per-group gradient decomposition (study A's gradient conflict and amplification).

Splits a split's mean-loss gradient into the gradients of two groups (default `consistent` /
`opposing`; `clean` / `corrupted` for study C) and reports, in total and per block (embeddings,
each attention layer, each MLP, unembedding), their cosine, norms, amplification and net
gradient. At any stationary point the cosine is -1 and ``|g_b| / |g_a| = n_a / n_b`` (``r / (1 -
r)``) whatever the circuits do, so only departures from that identity carry information; see
`interp.dissect.gradient_groups` and docs/study_a.md ("Cautions we measured": the gradient ratio has a trivial part).

Wraps `interp.dissect.gradient_groups` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.gradient_groups import gradient_stats, group_gradients
from interp.dissect.hooks import readout_of
from interp.errors import ConfigError, did_you_mean
from interp.metrics import LOSSES

STATS = ("cos", "norm_a", "norm_b", "amp", "amp_weighted", "net_norm", "net_rel")


@dataclass(frozen=True)
class Params:
    """Parameters of `grads`."""

    split: str = param("train", "Split whose examples are differentiated.")
    groups: str = param(
        "auto",
        "Two group masks of the split, 'a,b', or auto: the split's two groups "
        "(study A: consistent,opposing; study C: clean,corrupted).",
    )
    loss: str = param("auto", "Loss: cross_entropy, mse, or auto (the loss the run was trained with).")
    chunk: int = param(8192, "Largest batch differentiated at once.")


@dataclass(frozen=True)
class GradsResult(Result):
    """Gradient statistics; each tensor is [n_blocks + 1], index 0 the total over all parameters.

    Attributes:
        split: The split differentiated.
        groups: ``[a, b]``, the two group names.
        loss: The loss used.
        n_a: Examples in group a.
        n_b: Examples in group b.
        blocks: ``["total", block, ...]``.
        trivial_amp: ``n_a / n_b``, the amplification at any stationary point (``r / (1 - r)``).
        cos, norm_a, norm_b, amp, amp_weighted, net_norm, net_rel: See
            `interp.dissect.gradient_groups.GradientStats`.
    """

    analysis: ClassVar[str] = "grads"
    split: str
    groups: list
    loss: str
    n_a: int
    n_b: int
    blocks: list
    trivial_amp: float
    cos: Tensor
    norm_a: Tensor
    norm_b: Tensor
    amp: Tensor
    amp_weighted: Tensor
    net_norm: Tensor
    net_rel: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per block, the total first; `amp_weighted` is `amp` relative to `trivial_amp`."""
        frame = pd.DataFrame({"block": self.blocks, **{name: getattr(self, name).tolist() for name in STATS}})
        frame.insert(5, "trivial_amp", self.trivial_amp)
        return frame

    def figure(self) -> go.Figure:
        """Bars of the cosine and of the group-mean amplification per block, with the
        stationary-point references (cosine -1, amplification n_a / n_b).
        """
        a, b = self.groups
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=(f"gradient conflict cos(g_{a}, g_{b})", f"amplification |g_{b}| / |g_{a}|"),
        )
        custom = [
            [n, w, r]
            for n, w, r in zip(self.net_norm.tolist(), self.amp_weighted.tolist(), self.net_rel.tolist())
        ]
        hover = (
            f"block %{{x}}<br>%{{y:.4g}}<br>relative to r/(1-r) = {self.trivial_amp:.4g}: %{{customdata[1]:.4g}}"
            "<br>net gradient norm %{customdata[0]:.3g} (relative %{customdata[2]:.3g})<extra></extra>"
        )
        for col, (name, values) in enumerate((("cosine", self.cos), ("amplification", self.amp)), 1):
            fig.add_bar(
                x=self.blocks,
                y=values.tolist(),
                name=name,
                customdata=custom,
                hovertemplate=hover,
                row=1,
                col=col,
            )
        fig.add_hline(y=-1, line_dash="dash", annotation_text="stationary point: -1", row=1, col=1)
        fig.add_hline(
            y=self.trivial_amp,
            line_dash="dash",
            row=1,
            col=2,
            annotation_text=f"stationary point: n_{a}/n_{b} = r/(1-r) = {self.trivial_amp:.3g}",
        )
        step = "" if self.step is None else f", step {self.step}"
        fig.update_layout(
            title=(
                f"Per-group gradients on split '{self.split}'{step} ({a}: {self.n_a}, {b}: {self.n_b})"
                "<br><sup>dashed: the stationary point identity (cos -1, ratio n_a/n_b = r/(1-r)), "
                "true whatever the circuits do; only departures from it carry information</sup>"
            ),
            showlegend=False,
        )
        fig.update_xaxes(title_text="block (layer)")
        fig.update_yaxes(title_text="cosine", range=[-1.05, 1.05], row=1, col=1)
        fig.update_yaxes(title_text="ratio of norms", row=1, col=2)
        return fig


def _loss(subject: Subject, loss: str) -> str:
    if loss == "auto":
        return subject.loss
    if loss not in LOSSES:
        raise ConfigError(f"loss={loss!r} is not supported", did_you_mean(loss, (*LOSSES, "auto")))
    return loss


def compute(subject: Subject, params: Params) -> GradsResult:
    """Decompose the gradient of `params.split` into its two groups."""
    split = subject.split(params.split)
    groups = (
        list(split.groups)[:2] if params.groups == "auto" else [g.strip() for g in params.groups.split(",")]
    )
    if len(groups) != 2:
        raise ConfigError(
            f"groups={params.groups!r} must name two groups, 'a,b'", did_you_mean("", split.groups)
        )
    for group in groups:
        if group not in split.groups:
            raise ConfigError(
                f"group {group!r} is not a group of split {params.split!r}", did_you_mean(group, split.groups)
            )
    mask_a, mask_b = (split.groups[g] for g in groups)
    if not (mask_a.any() and mask_b.any()):
        raise ConfigError(
            f"split {params.split!r} has no {groups[0] if not mask_a.any() else groups[1]!r} examples",
            "choose a split holding both groups (study A: train)",
        )
    loss = _loss(subject, params.loss)
    # The training forward (`fast_readout`, no hooks, equal to the hooked readout to 1e-5 in
    # logits and gradients) where the model has one: several times faster to differentiate.
    # A TransformerLens model has neither: its forward's last position (`readout_of`).
    readout = getattr(subject.model, "fast_readout", None) or readout_of(subject.model)
    grads = group_gradients(
        subject.model, split.tokens, split.labels, mask_a, mask_b, loss, params.chunk, readout=readout
    )
    stats = gradient_stats(grads)
    return GradsResult(
        params=to_dict(params),
        step=subject.step,
        split=params.split,
        groups=groups,
        loss=loss,
        n_a=grads.n_a,
        n_b=grads.n_b,
        blocks=list(stats.blocks),
        trivial_amp=stats.trivial_amp,
        **{name: getattr(stats, name) for name in STATS},
    )


ANALYSIS = Analysis(
    name="grads",
    summary=REGISTRY["grads"][1],
    params=Params,
    compute=compute,
    result=GradsResult,
    models=("transformer", "quadratic_mlp"),
)
