"""Analysis ``ablate``: zero and mean ablation of every head and MLP, on each split (study A).

For each split, each ablation kind and each component (``L{l}H{h}`` heads at ``hook_z``,
``L{l}MLP`` at ``hook_mlp_out``; see `interp.dissect.ablation`), the model runs with that one
component ablated; the result is its accuracy and loss and their change from the unablated
model. Mean ablation uses the mean over the evaluated split itself, per position. Comparing
splits is the point: a shortcut head matters on `val` (shortcut-consistent) and hurts or does
nothing on `adv` (shortcut-opposing), a rule head matters on both.

Wraps `interp.dissect.ablation` (the table in docs/architecture.md pairs every dissection module
with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.ablation import ablate, components, parse_kinds
from interp.errors import ConfigError, did_you_mean
from interp.metrics import LOSSES


@dataclass(frozen=True)
class Params:
    """Parameters of ``ablate``."""

    splits: str = param("train,val,adv", "Comma-separated splits to evaluate on, or 'all'.")
    kinds: str = param("zero,mean", "Comma-separated ablation kinds: zero, mean.")
    loss: str = param("cross_entropy", "Loss to report: cross_entropy or mse.")
    max_examples: int = param(0, "Use at most this many examples of each split (0: all).")


@dataclass(frozen=True)
class AblateResult(Result):
    """Accuracy and loss with each component ablated, per split and kind.

    Attributes:
        splits: Split names (first tensor axis).
        kinds: Ablation kinds (second axis).
        components: Component names (third axis), e.g. ``L0H1``, ``L1MLP``.
        n_examples: Examples evaluated per split.
        accuracy: Ablated accuracy, [split, kind, component].
        loss: Ablated mean loss, [split, kind, component].
        base_accuracy: Unablated accuracy, [split].
        base_loss: Unablated mean loss, [split].
    """

    analysis: ClassVar[str] = "ablate"
    splits: list[str]
    kinds: list[str]
    components: list[str]
    n_examples: list[int]
    accuracy: Tensor
    loss: Tensor
    base_accuracy: Tensor
    base_loss: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per (split, kind, component), largest |accuracy change| first."""
        rows = []
        for s, split in enumerate(self.splits):
            for k, kind in enumerate(self.kinds):
                for c, comp in enumerate(self.components):
                    acc, loss = self.accuracy[s, k, c].item(), self.loss[s, k, c].item()
                    rows.append(
                        {
                            "split": split,
                            "kind": kind,
                            "component": comp,
                            "acc": acc,
                            "delta_acc": acc - self.base_accuracy[s].item(),
                            "loss": loss,
                            "delta_loss": loss - self.base_loss[s].item(),
                        }
                    )
        frame = pd.DataFrame(rows)
        key = frame["delta_acc"].abs() + 1e-9 * frame["delta_loss"].abs()  # ties: by loss change
        return frame.loc[key.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)

    def figure(self) -> go.Figure:
        """Heatmaps of the accuracy change, component x split, one per ablation kind."""
        delta = self.accuracy - self.base_accuracy[:, None, None]  # [split, kind, component]
        fig = make_subplots(
            rows=1, cols=len(self.kinds), subplot_titles=[f"{k} ablation" for k in self.kinds]
        )
        for k, kind in enumerate(self.kinds):
            fig.add_trace(
                go.Heatmap(
                    z=delta[:, k].T.tolist(),
                    x=self.splits,
                    y=self.components,
                    coloraxis="coloraxis",
                    customdata=self.accuracy[:, k].T.tolist(),
                    hovertemplate=(
                        f"{kind} ablation<br>component %{{y}}<br>split %{{x}}<br>"
                        "accuracy change %{z:+.3f}<br>accuracy %{customdata:.3f}<extra></extra>"
                    ),
                ),
                row=1,
                col=k + 1,
            )
            fig.update_xaxes(title_text="split", row=1, col=k + 1)
            fig.update_yaxes(title_text="component (layer, head)", autorange="reversed", row=1, col=k + 1)
        step = f" at step {self.step}" if self.step is not None else ""
        fig.update_layout(
            title=f"Accuracy change when ablating each head and MLP{step}",
            coloraxis={"colorscale": "RdBu", "cmid": 0, "colorbar": {"title": "Δ accuracy"}},
        )
        return fig


def _split_names(subject: Subject, splits: str) -> list[str]:
    if splits.strip() == "all":
        return list(subject.splits)
    names = [s.strip() for s in splits.split(",") if s.strip()]
    if not names:
        raise ConfigError("no split given", f"valid: all, {', '.join(subject.splits)}")
    for name in names:
        subject.split(name)  # a ConfigError with did-you-mean for a bad name
    return list(dict.fromkeys(names))


def compute(subject: Subject, params: Params) -> AblateResult:
    """Ablate every head and MLP on each requested split."""
    if params.loss not in LOSSES:
        raise ConfigError(f"unknown loss {params.loss!r}", did_you_mean(params.loss, LOSSES))
    kinds, names = parse_kinds(params.kinds), _split_names(subject, params.splits)
    effects, sizes = [], []
    for name in names:
        split = subject.split(name)
        n = len(split) if params.max_examples <= 0 else min(len(split), params.max_examples)
        effects.append(ablate(subject.model, split.tokens[:n], split.labels[:n], kinds, params.loss))
        sizes.append(n)
    return AblateResult(
        params=to_dict(params),
        step=subject.step,
        splits=names,
        kinds=list(kinds),
        components=[c.name for c in components(subject.model)],
        n_examples=sizes,
        accuracy=torch.stack([e.accuracy for e in effects]),
        loss=torch.stack([e.loss for e in effects]),
        base_accuracy=torch.tensor([e.base_accuracy for e in effects]),
        base_loss=torch.tensor([e.base_loss for e in effects]),
    )


ANALYSIS = Analysis(
    name="ablate",
    summary=REGISTRY["ablate"][1],
    params=Params,
    compute=compute,
    result=AblateResult,
)
