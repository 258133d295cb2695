"""Analysis ``patch``: activation patching between splits (study A).

The patched runs are on `split` (the target); the patched-in activations come from
`source`:

* ``source="counterfactual"``: each example's label-flipping counterfactual partner
  (`tasks.counterfactual`, ``flip="label"``: one position edited, label changed, shortcut
  kept); examples without a partner are dropped.
* ``source=<split name>`` (e.g. ``val`` into ``adv``): examples of the two splits are paired
  so that labels differ (`interp.dissect.patching.cross_pairs`, seeded).

Effects are the normalised logit-difference recovery (0: no effect, 1: the target run now
reads like the source run), the patched logit difference, and the patched accuracy against
the source labels, per site (see `interp.dissect.patching.SITES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from interp.config import to_dict
from interp.errors import ConfigError
from interp.dissect.patching import PatchPairs, aligned_pairs, cross_pairs, parse_sites, patch_sweep
from analyses.base import Analysis, Result, param
from analyses.subject import Subject
from tasks import MPSPTask, counterfactual
from analyses.registry import REGISTRY

COUNTERFACTUAL = "counterfactual"


@dataclass(frozen=True)
class Params:
    """Parameters of ``patch``."""

    split: str = param("adv", "Split whose runs are patched (the target / corrupted inputs).")
    source: str = param(COUNTERFACTUAL, "Where patched activations come from: 'counterfactual' (label-flipped partners of split) or a split name.")
    sites: str = param("resid_pre,z", "Comma-separated sites: resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, z_pos, pattern.")
    max_examples: int = param(2048, "Use at most this many pairs (0: all).")
    seed: int = param(0, "Seed of the counterfactual edits or of the cross-split pairing.")


@dataclass(frozen=True)
class PatchResult(Result):
    """Patching effects of every site, flattened site after site.

    Attributes:
        split: The target split.
        source: ``"counterfactual"`` or the source split.
        sites: Site names, in order.
        axes: Axis names per site (e.g. ``{"z": ["layer", "head"]}``).
        shapes: Effect tensor shape per site.
        n_pairs: Number of pairs measured.
        source_logit_diff: LD of the unpatched source runs.
        target_logit_diff: LD of the unpatched target runs.
        source_accuracy: Source runs' accuracy (against source labels).
        target_accuracy: Target runs' accuracy against the source labels.
        recovery: Normalised logit-difference recovery, [n_patches] (all sites, row-major).
        logit_diff: Patched logit difference, [n_patches].
        accuracy: Patched accuracy against the source labels, [n_patches].
    """

    analysis: ClassVar[str] = "patch"
    split: str
    source: str
    sites: list[str]
    axes: dict[str, list[str]]
    shapes: dict[str, list[int]]
    n_pairs: int
    source_logit_diff: float
    target_logit_diff: float
    source_accuracy: float
    target_accuracy: float
    recovery: Tensor
    logit_diff: Tensor
    accuracy: Tensor

    def site(self, name: str) -> dict[str, Tensor]:
        """``{"recovery", "logit_diff", "accuracy"}`` of one site, in its own shape."""
        if name not in self.sites:
            raise ConfigError(f"site {name!r} was not patched", f"patched: {', '.join(self.sites)}")
        sizes = [int(np.prod(self.shapes[s])) for s in self.sites]
        i = self.sites.index(name)
        part = slice(sum(sizes[:i]), sum(sizes[: i + 1]))
        return {k: getattr(self, k)[part].reshape(self.shapes[name]) for k in ("recovery", "logit_diff", "accuracy")}

    def to_frame(self) -> pd.DataFrame:
        """One row per patch (site, layer, head, pos), largest |recovery| first."""
        rows = []
        for name in self.sites:
            values = self.site(name)
            for index in np.ndindex(*self.shapes[name]):
                row = {"site": name, "layer": pd.NA, "head": pd.NA, "pos": pd.NA}
                row.update(dict(zip(self.axes[name], index)))
                row.update({k: v[index].item() for k, v in values.items()})
                rows.append(row)
        frame = pd.DataFrame(rows).astype({"layer": "Int64", "head": "Int64", "pos": "Int64"})
        order = frame["recovery"].abs().fillna(-1.0).sort_values(ascending=False, kind="stable").index
        return frame.loc[order].reset_index(drop=True)

    def figure(self) -> go.Figure:
        """A heatmap of recovery per site: layer x position, layer x head, or head x position."""
        fig = make_subplots(rows=1, cols=len(self.sites), subplot_titles=self.sites)
        for col, name in enumerate(self.sites, start=1):
            fig.add_trace(_heatmap(name, self.axes[name], self.site(name)["recovery"]), row=1, col=col)
            x_title = "head" if self.axes[name][-1] == "head" and len(self.axes[name]) == 2 else "position"
            fig.update_xaxes(title_text=x_title, row=1, col=col)
            fig.update_yaxes(title_text="layer" if len(self.axes[name]) == 2 else "layer, head", row=1, col=col,
                             autorange="reversed")
        step = f", step {self.step}" if self.step is not None else ""
        fig.update_layout(coloraxis={"colorscale": "RdBu", "cmid": 0, "colorbar": {"title": "recovery"}})
        fig.update_layout(title=f"Patching {self.source} into {self.split}{step}: logit-difference recovery "
                                f"({self.n_pairs} pairs)")
        return fig


def _heatmap(site: str, axes: list[str], values: Tensor) -> go.Heatmap:
    """One site's recovery as a heatmap; [layer, pos, head] is drawn as (layer, head) x pos."""
    if len(axes) == 3:  # z_pos: rows L{l}H{h}, columns positions
        layers, n_pos, heads = values.shape
        z = values.permute(0, 2, 1).reshape(layers * heads, n_pos)
        y = [f"L{l}H{h}" for l in range(layers) for h in range(heads)]
        x, names = list(range(n_pos)), ("layer, head", "position")
    else:
        z, y, x = values, list(range(values.shape[0])), list(range(values.shape[1]))
        names = ("layer", axes[1] if axes[1] == "head" else "position")
    return go.Heatmap(
        z=z.tolist(), x=x, y=y, coloraxis="coloraxis",
        hovertemplate=f"site {site}<br>{names[0]} %{{y}}<br>{names[1]} %{{x}}<br>recovery %{{z:.3f}}<extra></extra>",
    )


def pairs_for(subject: Subject, params: Params) -> PatchPairs:
    """The (source, target) pairs that `params` asks for."""
    target = subject.split(params.split)
    if params.source == COUNTERFACTUAL:
        if not isinstance(subject.task, MPSPTask):
            raise ConfigError(
                f"source='counterfactual' needs an MPSP task, not {subject.task.name!r}", "pass a split name as source"
            )
        partner = counterfactual(subject.task, target, flip="label", seed=params.seed)
        pairs = aligned_pairs(partner, target, keep=partner.extras["valid"])
    else:
        pairs = cross_pairs(subject.split(params.source), target, seed=params.seed)
    if len(pairs) == 0:
        raise ConfigError(f"no pairs between {params.source!r} and {params.split!r}", "their labels never differ")
    return pairs.head(params.max_examples)


def compute(subject: Subject, params: Params) -> PatchResult:
    """Patch every site of `params.sites` from the source runs into the target runs."""
    sites = list(parse_sites(params.sites))
    pairs = pairs_for(subject, params)
    sweep = patch_sweep(subject.model, pairs, sites)
    effects = [sweep.effects[s] for s in sites]
    return PatchResult(
        params=to_dict(params), step=subject.step, split=params.split, source=params.source, sites=sites,
        axes={e.site: list(e.axes) for e in effects}, shapes={e.site: list(e.recovery.shape) for e in effects},
        n_pairs=len(pairs), source_logit_diff=sweep.source_logit_diff, target_logit_diff=sweep.target_logit_diff,
        source_accuracy=sweep.source_accuracy, target_accuracy=sweep.target_accuracy,
        recovery=torch.cat([e.recovery.flatten() for e in effects]),
        logit_diff=torch.cat([e.logit_diff.flatten() for e in effects]),
        accuracy=torch.cat([e.accuracy.flatten() for e in effects]),
    )


ANALYSIS = Analysis(
    name="patch",
    summary=REGISTRY["patch"][1],
    params=Params,
    compute=compute,
    result=PatchResult,
)
