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
the source labels, per site (see `interp.dissect.patching.SITES`). Each effect carries its
uncertainty (`interp.dissect.patch_stats`): the per-pair patched logit differences are kept,
a bootstrap over pairs gives intervals for the logit difference and the recovery, and with
``permutations > 0`` a permutation test re-runs the patch on randomly re-paired examples.
`STATS_FIELDS`, `effect_stats` and `add_interval_row` are shared with ``attribute`` and
``path-patch``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from interp.config import to_dict
from interp.errors import ConfigError
from interp.dissect.patch_stats import EffectStats, effect_statistics, permutation_null
from interp.dissect.patching import PatchPairs, aligned_pairs, cross_pairs, parse_sites, patch_sweep
from analyses.base import Analysis, Result, param
from analyses.subject import Subject
from tasks import MPSPTask, counterfactual
from analyses.registry import REGISTRY

COUNTERFACTUAL = "counterfactual"
# Help texts of the statistics parameters every patching analysis has.
N_BOOT_HELP = "Bootstrap resamples of the pairs for the confidence intervals."
CI_HELP = "Confidence level of the bootstrap intervals."
PERMUTATIONS_HELP = "Re-pairings for the permutation test (the patch is re-run on each; 0: no p-values)."


@dataclass(frozen=True)
class Params:
    """Parameters of ``patch``."""

    split: str = param("adv", "Split whose runs are patched (the target / corrupted inputs).")
    source: str = param(COUNTERFACTUAL, "Where patched activations come from: 'counterfactual' (label-flipped partners of split) or a split name.")
    sites: str = param("resid_pre,z", "Comma-separated sites: resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, z_pos, pattern.")
    max_examples: int = param(2048, "Use at most this many pairs (0: all).")
    seed: int = param(0, "Seed of the counterfactual edits, the cross-split pairing, the bootstrap and the re-pairings.")
    n_boot: int = param(1000, N_BOOT_HELP)
    ci: float = param(0.95, CI_HELP)
    permutations: int = param(0, PERMUTATIONS_HELP)


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
        recovery_low: Lower end of the recovery's bootstrap interval, [n_patches].
        recovery_high: Upper end, [n_patches].
        logit_diff_low: Lower end of the patched logit difference's interval, [n_patches].
        logit_diff_high: Upper end, [n_patches].
        p_value: Permutation p-value per patch, [n_patches] (NaN without permutations).
        per_example: Patched logit difference of every pair, [n_patches, n_pairs].
        source_per_example: Unpatched source logit difference of every pair, [n_pairs].
        target_per_example: Unpatched target logit difference of every pair, [n_pairs].
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
    recovery_low: Tensor
    recovery_high: Tensor
    logit_diff_low: Tensor
    logit_diff_high: Tensor
    p_value: Tensor
    per_example: Tensor
    source_per_example: Tensor
    target_per_example: Tensor

    def site(self, name: str) -> dict[str, Tensor]:
        """Every per-patch tensor of one site (`EFFECT_KEYS`), in the site's own shape."""
        if name not in self.sites:
            raise ConfigError(f"site {name!r} was not patched", f"patched: {', '.join(self.sites)}")
        sizes = [int(np.prod(self.shapes[s])) for s in self.sites]
        i = self.sites.index(name)
        part = slice(sum(sizes[:i]), sum(sizes[: i + 1]))
        return {k: getattr(self, k)[part].reshape(self.shapes[name]) for k in EFFECT_KEYS}

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
        """Per site, a heatmap of recovery (layer x position, layer x head, or head x position),
        and below it every patch's recovery with its bootstrap interval as error bars."""
        fig = make_subplots(rows=2, cols=len(self.sites), subplot_titles=self.sites, row_heights=[0.6, 0.4])
        for col, name in enumerate(self.sites, start=1):
            values = self.site(name)
            fig.add_trace(_heatmap(name, self.axes[name], values["recovery"]), row=1, col=col)
            add_interval_row(fig, col, patch_labels(self.axes[name], self.shapes[name]), values, self.ci_label)
            x_title = "head" if self.axes[name][-1] == "head" and len(self.axes[name]) == 2 else "position"
            fig.update_xaxes(title_text=x_title, row=1, col=col)
            fig.update_yaxes(title_text="layer" if len(self.axes[name]) == 2 else "layer, head", row=1, col=col,
                             autorange="reversed")
        step = f", step {self.step}" if self.step is not None else ""
        fig.update_layout(coloraxis={"colorscale": "RdBu", "cmid": 0, "colorbar": {"title": "recovery"}})
        fig.update_layout(title=f"Patching {self.source} into {self.split}{step}: logit-difference recovery "
                                f"({self.n_pairs} pairs; bars: {self.ci_label})", showlegend=False)
        return fig

    @property
    def ci_label(self) -> str:
        """How the error bars were made, for titles."""
        return f"{self.params.get('ci', 0.95):.0%} bootstrap interval"


EFFECT_KEYS = ("recovery", "logit_diff", "accuracy", "recovery_low", "recovery_high", "logit_diff_low",
               "logit_diff_high", "p_value")


def patch_labels(axes: list[str], shape: list[int]) -> list[str]:
    """A short label per patch of an effect tensor, in row-major order (``L1 P3``, ``L0 H1``)."""
    letters = {"layer": "L", "head": "H", "pos": "P", "sender": "S", "receiver": "R"}
    return [" ".join(f"{letters.get(a, a)}{i}" for a, i in zip(axes, index)) for index in np.ndindex(*shape)]


def add_interval_row(fig: go.Figure, col: int, labels: list[str], values: dict[str, Tensor], ci_label: str) -> None:
    """Add row 2 of column `col`: recovery per patch with its interval as error bars."""
    rec, low, high = (values[k].flatten() for k in ("recovery", "recovery_low", "recovery_high"))
    p = values["p_value"].flatten()
    fig.add_trace(go.Scatter(
        x=labels, y=rec.tolist(), mode="markers", marker={"size": 6, "color": "black"},
        error_y={"type": "data", "symmetric": False, "array": (high - rec).tolist(), "arrayminus": (rec - low).tolist()},
        customdata=np.stack([low.numpy(), high.numpy(), p.numpy()], axis=-1).tolist(),
        hovertemplate=(f"patch %{{x}}<br>recovery %{{y:.3f}}<br>{ci_label} [%{{customdata[0]:.3f}}, "
                       "%{customdata[1]:.3f}]<br>permutation p %{customdata[2]:.3g}<extra></extra>"),
    ), row=2, col=col)
    fig.update_yaxes(title_text="recovery", row=2, col=col)
    fig.update_xaxes(title_text="patch", row=2, col=col)


def effect_stats(
    per_example: Tensor, source: Tensor, target: Tensor, params: Any,
    rerun: Callable[[PatchPairs], Tensor] | None = None, pairs: PatchPairs | None = None,
) -> EffectStats:
    """Bootstrap intervals of a table of effects and, if ``params.permutations``, p-values.

    Args:
        per_example: Patched logit difference of every pair per patch, [*m, n].
        source: Unpatched source logit differences, [n].
        target: Unpatched target logit differences, [n].
        params: Has ``n_boot``, ``ci``, ``permutations`` and ``seed``.
        rerun: ``PatchPairs -> mean patched logit difference [*m]``: the same patch on other pairs.
        pairs: The pairs `rerun` re-pairs.
    """
    null = None
    if params.permutations < 0:
        raise ConfigError(f"permutations={params.permutations} must be >= 0", "0 skips the permutation test")
    if params.permutations > 0:
        null = permutation_null(rerun, pairs, params.permutations, seed=params.seed)
    return effect_statistics(per_example, source, target, n_boot=params.n_boot, level=params.ci, seed=params.seed,
                             null=null)


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


def _flat_logit_diff(sweep, sites: list[str]) -> Tensor:
    return torch.cat([sweep.effects[s].logit_diff.flatten() for s in sites])


def compute(subject: Subject, params: Params) -> PatchResult:
    """Patch every site of `params.sites` from the source runs into the target runs."""
    sites = list(parse_sites(params.sites))
    pairs = pairs_for(subject, params)
    sweep = patch_sweep(subject.model, pairs, sites)
    effects = [sweep.effects[s] for s in sites]
    per_example = torch.cat([e.per_example.flatten(0, -2) for e in effects])
    stats = effect_stats(per_example, sweep.source_per_example, sweep.target_per_example, params,
                         lambda other: _flat_logit_diff(patch_sweep(subject.model, other, sites), sites), pairs)
    return PatchResult(
        params=to_dict(params), step=subject.step, split=params.split, source=params.source, sites=sites,
        axes={e.site: list(e.axes) for e in effects}, shapes={e.site: list(e.recovery.shape) for e in effects},
        n_pairs=len(pairs), source_logit_diff=sweep.source_logit_diff, target_logit_diff=sweep.target_logit_diff,
        source_accuracy=sweep.source_accuracy, target_accuracy=sweep.target_accuracy,
        recovery=torch.cat([e.recovery.flatten() for e in effects]),
        logit_diff=torch.cat([e.logit_diff.flatten() for e in effects]),
        accuracy=torch.cat([e.accuracy.flatten() for e in effects]),
        recovery_low=stats.recovery_low, recovery_high=stats.recovery_high, logit_diff_low=stats.logit_diff_low,
        logit_diff_high=stats.logit_diff_high, p_value=stats.p_value, per_example=per_example,
        source_per_example=sweep.source_per_example, target_per_example=sweep.target_per_example,
    )


ANALYSIS = Analysis(
    name="patch",
    summary=REGISTRY["patch"][1],
    params=Params,
    compute=compute,
    result=PatchResult,
)
