"""Analysis ``progress``: restricted and excluded loss, the progress measures of modular addition.

The model's logits on all p x p inputs are restricted to the key frequencies of ``x + y`` (plus
each class's mean), or have those frequencies excluded (`interp.dissect.progress_measures`),
and the loss and accuracy of the full, restricted and excluded logits are measured on every
split (labels as stored: study C's corrupted training labels stay corrupted), with the loss the
run was trained with. Over a run's checkpoints (``interp evolve --analysis progress --param
frequencies=...``) the restricted loss falls as the generalising circuit forms and the excluded
loss rises once the model relies on it, before the test loss moves (Nanda et al.).

Wraps `interp.dissect.progress_measures` (the table in docs/architecture.md pairs every dissection
module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pandas as pd
import plotly.graph_objects as go
import torch
from torch import Tensor

from analyses.base import Analysis, Result, param
from analyses.fourier import FREQUENCIES_HELP, RATIO_HELP, REFERENCE, choose_keys, grid_tokens, modulus
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.hooks import readout_of
from interp.dissect.progress_measures import excluded_logits, restricted_logits
from interp.errors import ConfigError
from interp.metrics import per_example_loss

DEFINITION = """\
The model's logits on all p x p inputs (x, y) are, for each output class c, a function over the
grid. The restricted logits keep only that function's mean and its components along
cos(2 pi k (x + y) / p) and sin(2 pi k (x + y) / p) for the key frequencies k (an orthogonal
projection); the excluded logits remove exactly those components. Restricted loss and excluded
loss are the loss of these logits on a split's examples with its labels. A low restricted loss
means the key-frequency circuit alone solves the task; a high excluded loss means the model
depends on it. Key frequencies as in `fourier` (from the embedding spectrum, or given)."""
KINDS = ("full", "restricted", "excluded")


@dataclass(frozen=True)
class Params:
    """Parameters of ``progress``."""

    frequencies: str = param("auto", FREQUENCIES_HELP)
    key_ratio: float = param(3.0, RATIO_HELP)


@dataclass(frozen=True)
class ProgressResult(Result):
    """Loss and accuracy of the full, restricted and excluded logits on every split.

    Attributes:
        p: The modulus.
        key_frequencies: The key frequencies used.
        splits: Split names (first tensor axis).
        kinds: ``full``, ``restricted``, ``excluded`` (second axis).
        loss: Mean loss, [split, kind].
        accuracy: Accuracy against the split's labels, [split, kind].
    """

    analysis: ClassVar[str] = "progress"
    p: int
    key_frequencies: list[int]
    splits: list[str]
    kinds: list[str]
    loss: Tensor
    accuracy: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per split: loss and accuracy of the full, restricted and excluded logits."""
        rows = []
        for s, split in enumerate(self.splits):
            row = {"split": split, "key_frequencies": ",".join(map(str, self.key_frequencies))}
            for k, kind in enumerate(self.kinds):
                row[f"{kind}_loss"] = self.loss[s, k].item()
                row[f"{kind}_acc"] = self.accuracy[s, k].item()
            rows.append(row)
        return pd.DataFrame(rows)

    def figure(self) -> go.Figure:
        """Loss of the full, restricted and excluded logits, grouped by split."""
        fig = go.Figure(
            [
                go.Bar(
                    name=kind,
                    x=self.splits,
                    y=self.loss[:, k].tolist(),
                    customdata=self.accuracy[:, k].tolist(),
                    hovertemplate=(
                        f"{kind} logits<br>split %{{x}}<br>loss %{{y:.4g}}<br>"
                        "accuracy %{customdata:.3f}<extra></extra>"
                    ),
                )
                for k, kind in enumerate(self.kinds)
            ]
        )
        step = f" at step {self.step}" if self.step is not None else ""
        fig.update_layout(
            barmode="group",
            yaxis_type="log",
            xaxis_title="split",
            yaxis_title="loss (log scale)",
            title=f"Restricted and excluded loss{step}; key frequencies {self.key_frequencies}",
        )
        return fig


def _rows(split_tokens: Tensor, p: int) -> Tensor:
    """Grid rows ``x * p + y`` of a split's examples."""
    return split_tokens[:, 0] * p + split_tokens[:, 1]


@torch.no_grad()
def compute(subject: Subject, params: Params) -> ProgressResult:
    """Full, restricted and excluded loss and accuracy of a modular-addition model on every split."""
    p = modulus(subject)
    keys = choose_keys(subject.model, p, params.frequencies, params.key_ratio)
    logits = readout_of(subject.model)(grid_tokens(p))  # ours, or a TransformerLens model
    variants = {
        "full": logits,
        "restricted": restricted_logits(logits, p, keys),
        "excluded": excluded_logits(logits, p, keys),
    }
    losses, accuracies = [], []
    for split in subject.splits.values():
        if (split.tokens[:, :2] >= p).any():
            raise ConfigError(
                f"split {split.name!r} has inputs outside 0..{p - 1}", "progress measures need x, y < p"
            )
        rows = _rows(split.tokens, p)
        losses.append(
            [per_example_loss(v[rows], split.labels, subject.loss).mean() for v in variants.values()]
        )
        accuracies.append([(v[rows].argmax(-1) == split.labels).float().mean() for v in variants.values()])
    return ProgressResult(
        params=to_dict(params),
        step=subject.step,
        p=p,
        key_frequencies=keys,
        splits=list(subject.splits),
        kinds=list(KINDS),
        loss=torch.tensor(losses),
        accuracy=torch.tensor(accuracies),
    )


ANALYSIS = Analysis(
    name="progress",
    summary=REGISTRY["progress"][1],
    params=Params,
    compute=compute,
    result=ProgressResult,
    models=("transformer", "quadratic_mlp"),
    tasks=("modadd",),
    definition=DEFINITION,
    reference=REFERENCE,
)
