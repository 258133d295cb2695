"""`prune`: remove hidden neurons of study C's quadratic MLP in order of IPR, and track accuracy.

Neurons are removed by zeroing their `hook_post` activation (= zeroing their `W_U` row) inside
`model.hooks(...)` (`interp.dissect.pruning`), lowest IPR first by default (`analyses.ipr`: memorising
neurons first). After each removal count the analysis measures, on the same weights: clean
train accuracy, corrupted train accuracy against the *corrupted* labels (memorisation), the
same examples against their *true* labels (does the rule show through once memorisation is
pruned?), and test accuracy. The parent work's claim: pruning low-IPR neurons raises clean
(and true-label) accuracy while corrupted-label accuracy falls. With every neuron removed the
logits are all zero and argmax predicts class 0 (see `interp.dissect.pruning`).

Wraps `interp.dissect.pruning` and `interp.dissect.fourier` (the table in docs/architecture.md pairs
every dissection module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch

from analyses.base import Analysis, Result, param
from analyses.ipr import input_weights
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.fourier import neuron_ipr
from interp.dissect.pruning import prune_curve
from interp.errors import ConfigError, did_you_mean
from interp.splits import Split

ORDERS = ("ipr", "ipr_descending", "random")
# Curves drawn by the figure: metric key -> legend label.
CURVES = {
    "train/clean/acc": "train, clean examples",
    "train/corrupted/acc": "train, corrupted examples (corrupted labels)",
    "train_true/corrupted/acc": "train, corrupted examples (true labels)",
    "test/acc": "test",
}


@dataclass(frozen=True)
class Params:
    """Parameters of `prune`."""

    order: str = param("ipr", "Removal order: ipr (lowest IPR first), ipr_descending, or random.")
    points: int = param(21, "Number of removal fractions, evenly spaced over [0, 1].")
    seed: int = param(0, "Seed of the random order.")


@dataclass(frozen=True)
class PruneResult(Result):
    """Accuracy (and loss) per split and group after removing each number of neurons.

    Attributes:
        order: The removal order used.
        d_hidden: Number of hidden neurons.
        removed: Neurons removed at each point.
        neuron_order: The neurons in removal order.
        records: One `interp.metrics.evaluate` record per point (``"train_true/..."``: the
            train split scored against its true labels).
    """

    analysis: ClassVar[str] = "prune"
    order: str
    d_hidden: int
    removed: list[int]
    neuron_order: list[int]
    records: list[dict[str, float]]

    def to_frame(self) -> pd.DataFrame:
        """One row per removal count: removed, fraction, then every metric."""
        frame = pd.DataFrame(self.records)
        frame.insert(0, "fraction", [r / self.d_hidden for r in self.removed])
        frame.insert(0, "removed", self.removed)
        return frame

    def figure(self) -> go.Figure:
        """Accuracy against the fraction of neurons removed."""
        frame = self.to_frame()
        fig = go.Figure()
        for key, label in CURVES.items():
            if key in frame:
                fig.add_scatter(
                    x=frame["fraction"],
                    y=frame[key],
                    name=label,
                    mode="lines+markers",
                    customdata=frame["removed"],
                    hovertemplate=f"{label}<br>%{{customdata}} neurons removed<br>acc %{{y:.3f}}<extra></extra>",
                )
        step = "" if self.step is None else f", step {self.step}"
        how = {"ipr": "lowest IPR first", "ipr_descending": "highest IPR first", "random": "random order"}[
            self.order
        ]
        fig.update_layout(
            title=f"Pruning hidden neurons, {how}{step}",
            xaxis_title="fraction of hidden neurons removed",
            yaxis_title="accuracy",
            yaxis_range=[-0.02, 1.02],
        )
        return fig


def removal_order(subject: Subject, params: Params) -> torch.Tensor:
    """Neuron indices in the order `params.order` removes them (stable on ties)."""
    left, right, _, _ = input_weights(subject)
    if params.order == "random":
        return torch.randperm(left.shape[1], generator=torch.Generator().manual_seed(params.seed))
    values = torch.nan_to_num(neuron_ipr([left, right])["joint"], nan=0.0)  # dead neurons go first
    return torch.argsort(values, descending=params.order == "ipr_descending", stable=True)


def compute(subject: Subject, params: Params) -> PruneResult:
    """Prune `subject.model` (a quadratic MLP) neuron by neuron and evaluate every split."""
    if params.order not in ORDERS:
        raise ConfigError(
            f"order={params.order!r} is not a removal order", did_you_mean(params.order, ORDERS)
        )
    if params.points < 2:
        raise ConfigError(f"points={params.points} must be at least 2 (0 and all neurons removed)")
    order = removal_order(subject, params)
    splits = dict(subject.splits)
    train = splits.get("train")
    if train is not None and "true_labels" in train.extras:
        splits["train_true"] = Split("train_true", train.tokens, train.extras["true_labels"], train.groups)
    fractions = [i / (params.points - 1) for i in range(params.points)]
    removed, records = prune_curve(subject.model, order, splits, fractions=fractions, loss=subject.loss)
    return PruneResult(
        params=to_dict(params),
        step=subject.step,
        order=params.order,
        d_hidden=len(order),
        removed=removed,
        neuron_order=order.tolist(),
        records=records,
    )


ANALYSIS = Analysis(
    name="prune",
    summary=REGISTRY["prune"][1],
    params=Params,
    compute=compute,
    result=PruneResult,
    models=("quadratic_mlp",),
)
