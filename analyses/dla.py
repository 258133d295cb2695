"""Analysis ``dla``: direct logit attribution of every head, MLP (or neuron) and embedding, per split
and group.

Each example's label-contrast logit difference (its label's logit minus the mean of the other
classes' logits, at the readout position) splits exactly into one direct term per component
of the final residual stream, through the final LayerNorm's scale on that run
(`interp.dissect.logit_attribution`). The result holds each component's mean term (and its
standard error) over every split and every group of each split (study A: ``val`` vs ``adv``,
``consistent`` vs ``opposing``), so a head that writes the shortcut's answer directly shows up
as positive on shortcut-consistent and negative on shortcut-opposing examples. Over a run's
checkpoints: ``interp evolve --analysis dla``.

Wraps `interp.dissect.logit_attribution` (the table in docs/architecture.md pairs every dissection
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
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.logit_attribution import direct_logit_attribution
from interp.errors import ConfigError

DEFINITION = """\
With the final LayerNorm's scale held at its value on each run, the logit difference between an
example's label and the mean of the other classes (with two classes: the other class) is a sum
of one term per component that writes into the residual stream: the token and position
embeddings, each attention head (its z times its rows of W_O), each MLP (or each neuron: its
activation times its row of W_out), the summed output biases, and a constant from the final
LayerNorm's bias and the unembedding bias. A component's term is its output, centred and divided
by the LayerNorm scale, projected on the LayerNorm weight times the label-contrast direction of
the unembedding; this is TransformerLens's logit_attrs on a model with the final LayerNorm
folded into W_U. The table reports each term's mean and standard error per split and group."""
REFERENCE = (
    'Elhage et al., "A Mathematical Framework for Transformer Circuits" (2021); Wang, Variengien, '
    'Conmy, Shlegeris and Steinhardt, "Interpretability in the Wild: a Circuit for Indirect Object '
    'Identification in GPT-2 small" (2022).'
)


@dataclass(frozen=True)
class Params:
    """Parameters of ``dla``."""

    splits: str = param("all", "Comma-separated splits, or 'all'; each split's groups are reported too.")
    neurons: bool = param(False, "Attribute to every MLP neuron instead of whole MLPs.")
    max_examples: int = param(0, "Use at most this many examples of each split (0: all).")


@dataclass(frozen=True)
class DLAResult(Result):
    """Mean direct term of every component, for every split and group.

    Attributes:
        rows: ``split`` or ``split/group`` names (first tensor axis).
        components: Component names (second axis), see `interp.dissect.logit_attribution`.
        n_examples: Examples in each row.
        attribution: Mean term, [row, component].
        sem: Standard error of the mean term, [row, component].
        logit_diff: Mean label-contrast logit difference of each row, [row] (the terms' sum).
    """

    analysis: ClassVar[str] = "dla"
    rows: list[str]
    components: list[str]
    n_examples: list[int]
    attribution: Tensor
    sem: Tensor
    logit_diff: Tensor

    def to_frame(self) -> pd.DataFrame:
        """One row per (split, group, component), largest |attribution| first."""
        records = []
        for r, row in enumerate(self.rows):
            split, _, group = row.partition("/")
            for c, comp in enumerate(self.components):
                records.append(
                    {
                        "split": split,
                        "group": group or "all",
                        "component": comp,
                        "attribution": self.attribution[r, c].item(),
                        "sem": self.sem[r, c].item(),
                        "logit_diff": self.logit_diff[r].item(),
                        "n": self.n_examples[r],
                    }
                )
        frame = pd.DataFrame(records)
        order = frame["attribution"].abs().sort_values(ascending=False, kind="stable").index
        return frame.loc[order].reset_index(drop=True)

    def figure(self) -> go.Figure:
        """A heatmap of mean direct terms, split/group x component."""
        labels = [
            f"{row} (n={n}, LD {ld:.2f})"
            for row, n, ld in zip(self.rows, self.n_examples, self.logit_diff.tolist())
        ]
        fig = go.Figure(
            go.Heatmap(
                z=self.attribution.tolist(),
                x=self.components,
                y=labels,
                customdata=self.sem.tolist(),
                colorscale="RdBu",
                zmid=0,
                colorbar={"title": "direct term"},
                hovertemplate=(
                    "%{y}<br>component %{x}<br>mean direct term %{z:.3f} ± %{customdata:.3f} (s.e.)"
                    "<extra></extra>"
                ),
            )
        )
        step = f" at step {self.step}" if self.step is not None else ""
        fig.update_layout(
            title=f"Direct logit attribution to the label-contrast logit difference{step}",
            xaxis_title="component (embeddings, layer and head, MLP, biases)",
            yaxis={"title": "split / group", "autorange": "reversed"},
        )
        return fig


def _split_names(subject: Subject, splits: str) -> list[str]:
    if splits.strip() == "all":
        return list(subject.splits)
    names = list(dict.fromkeys(s.strip() for s in splits.split(",") if s.strip()))
    if not names:
        raise ConfigError("no split given", f"valid: all, {', '.join(subject.splits)}")
    for name in names:
        subject.split(name)  # a ConfigError with did-you-mean for a bad name
    return names


def compute(subject: Subject, params: Params) -> DLAResult:
    """Attribute every split's label-contrast logit difference to the model's components."""
    rows, sizes, means, sems, lds = [], [], [], [], []
    components: tuple[str, ...] = ()
    for name in _split_names(subject, params.splits):
        split = subject.split(name)
        n = len(split) if params.max_examples <= 0 else min(len(split), params.max_examples)
        result = direct_logit_attribution(
            subject.model, split.tokens[:n], split.labels[:n], neurons=params.neurons
        )
        components = result.components
        masks = {name: torch.ones(n, dtype=torch.bool)}
        masks.update({f"{name}/{g}": m[:n] for g, m in split.groups.items() if m[:n].any()})
        for row, mask in masks.items():
            terms = result.per_example[:, mask]
            rows.append(row)
            sizes.append(int(mask.sum()))
            means.append(terms.mean(1))
            sems.append(
                terms.std(1) / mask.sum().sqrt()
                if mask.sum() > 1
                else torch.full_like(terms[:, 0], torch.nan)
            )
            lds.append(result.logit_diff[mask].mean())
    return DLAResult(
        params=to_dict(params),
        step=subject.step,
        rows=rows,
        components=list(components),
        n_examples=sizes,
        attribution=torch.stack(means),
        sem=torch.stack(sems),
        logit_diff=torch.stack(lds),
    )


ANALYSIS = Analysis(
    name="dla",
    summary=REGISTRY["dla"][1],
    params=Params,
    compute=compute,
    result=DLAResult,
    definition=DEFINITION,
    reference=REFERENCE,
)
