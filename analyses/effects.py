"""What the patching analyses share (``patch``, ``attribute``, ``path-patch``): pairs, effect
tables and their statistics.

* `pairs_for`: the (source, target) pairs a ``split`` / ``source`` / ``seed`` / ``max_examples``
  parameter set asks for: each target example with its label-flipped counterfactual partner
  (``source="counterfactual"``, MPSP tasks), or examples of two splits paired so labels differ.
* `SiteEffects`: a `Result` holding per-site effect tensors flattened site after site, with
  per-pair values, bootstrap intervals and permutation p-values (`interp.dissect.patch_stats`);
  its table has one row per patch and its figure a heatmap per site over a row of error bars.
* `effect_stats`: the intervals and, when asked for, the permutation test (which re-runs the
  analysis's own patch on re-paired examples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from torch import Tensor

from analyses.base import Result, param
from analyses.subject import Subject
from interp.config import to_dict
from interp.dissect.patch_stats import EffectStats, effect_statistics, permutation_null
from interp.dissect.patching import PatchPairs, aligned_pairs, cross_pairs
from interp.errors import ConfigError
from tasks import MPSPTask, counterfactual

COUNTERFACTUAL = "counterfactual"
# Help texts of the parameters every patching analysis has.
SPLIT_HELP = "Split whose runs are patched (the target / corrupted inputs)."
SOURCE_HELP = (
    "Where patched activations come from: 'counterfactual' (label-flipped partners of split) or a split name."
)
MAX_EXAMPLES_HELP = "Use at most this many pairs (0: all)."
SEED_HELP = "Seed of the counterfactual edits, the cross-split pairing, the bootstrap and the re-pairings."
N_BOOT_HELP = "Bootstrap resamples of the pairs for the confidence intervals."
CI_HELP = "Confidence level of the bootstrap intervals."
PERMUTATIONS_HELP = "Re-pairings for the permutation test (the patch is re-run on each; 0: no p-values)."
MIN_RECOVERY_GAP = 0.1
"""Smallest ``|LD_source - LD_target|`` (in logits) for which a recovery is defined. The recovery
divides by this gap: on a model that barely tells the two inputs apart (a shortcut-only model
gives about 0.003) it turns noise into values like 6.8 or -2.7, so below the threshold the table
shows no recovery (NaN, ``recovery_defined`` False) and the figure says it is undefined."""


@dataclass(frozen=True)
class PairParams:
    """The parameters every pair-patching analysis shares: which pairs, and their statistics.

    ``patch``, ``attribute`` and ``path-patch`` subclass it and add what they patch.
    """

    split: str = param("adv", SPLIT_HELP)
    source: str = param(COUNTERFACTUAL, SOURCE_HELP)
    max_examples: int = param(2048, MAX_EXAMPLES_HELP)
    seed: int = param(0, SEED_HELP)
    n_boot: int = param(1000, N_BOOT_HELP)
    ci: float = param(0.95, CI_HELP)
    permutations: int = param(0, PERMUTATIONS_HELP)


STAT_KEYS = (
    "recovery",
    "logit_diff",
    "recovery_low",
    "recovery_high",
    "logit_diff_low",
    "logit_diff_high",
    "p_value",
)


def pairs_for(subject: Subject, params: Any) -> PatchPairs:
    """The (source, target) pairs `params` asks for (``split``, ``source``, ``seed``, ``max_examples``)."""
    target = subject.split(params.split)
    if params.source == COUNTERFACTUAL:
        if not isinstance(subject.task, MPSPTask):
            raise ConfigError(
                f"source='counterfactual' needs an MPSP task, not {subject.task.name!r}",
                "pass a split name as source",
            )
        partner = counterfactual(subject.task, target, flip="label", seed=params.seed)
        pairs = aligned_pairs(partner, target, keep=partner.extras["valid"])
    else:
        pairs = cross_pairs(subject.split(params.source), target, seed=params.seed)
    if len(pairs) == 0:
        raise ConfigError(
            f"no pairs between {params.source!r} and {params.split!r}", "their labels never differ"
        )
    return pairs.head(params.max_examples)


def effect_stats(
    per_example: Tensor,
    source: Tensor,
    target: Tensor,
    params: Any,
    rerun: Callable[[PatchPairs], Tensor] | None = None,
    pairs: PatchPairs | None = None,
) -> EffectStats:
    """Bootstrap intervals of a table of effects and, if ``params.permutations``, p-values.

    Args:
        per_example: Patched logit difference of every pair per patch, [*m, n].
        source: Unpatched source logit differences, [n].
        target: Unpatched target logit differences, [n].
        params: Has ``n_boot``, ``ci``, ``permutations`` and ``seed``.
        rerun: ``PatchPairs -> mean patched logit difference [*m]``: the same patch on other pairs.
        pairs: The pairs `rerun` re-pairs.

    Raises:
        ConfigError: For negative ``permutations`` (and bad ``n_boot`` / ``ci``).
    """
    if params.permutations < 0:
        raise ConfigError(f"permutations={params.permutations} must be >= 0", "0 skips the permutation test")
    null = (
        permutation_null(rerun, pairs, params.permutations, seed=params.seed) if params.permutations else None
    )
    return effect_statistics(
        per_example, source, target, n_boot=params.n_boot, level=params.ci, seed=params.seed, null=null
    )


def patch_labels(axes: list[str], shape: list[int]) -> list[str]:
    """A short label per patch of an effect tensor, in row-major order (``L1 P3``, ``L0 H1``)."""
    letters = {"layer": "L", "head": "H", "pos": "P"}
    return [" ".join(f"{letters.get(a, a)}{i}" for a, i in zip(axes, index)) for index in np.ndindex(*shape)]


def add_interval_row(
    fig: go.Figure, row: int, col: int, labels: list[str], values: dict[str, Tensor], ci: float
) -> None:
    """Add every patch's recovery with its bootstrap interval as error bars at (`row`, `col`)."""
    rec, low, high = (values[k].flatten() for k in ("recovery", "recovery_low", "recovery_high"))
    p = values["p_value"].flatten()
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=rec.tolist(),
            mode="markers",
            marker={"size": 6, "color": "black"},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": (high - rec).tolist(),
                "arrayminus": (rec - low).tolist(),
            },
            customdata=np.stack([low.numpy(), high.numpy(), p.numpy()], axis=-1).tolist(),
            hovertemplate=(
                f"patch %{{x}}<br>recovery %{{y:.3f}}<br>{ci:.0%} interval [%{{customdata[0]:.3f}}, "
                "%{customdata[1]:.3f}]<br>permutation p %{customdata[2]:.3g}<extra></extra>"
            ),
        ),
        row=row,
        col=col,
    )
    fig.update_yaxes(title_text="recovery", row=row, col=col)
    fig.update_xaxes(title_text="patch", row=row, col=col)


class RecoveryGap:
    """What every recovery-reporting result shares: the gap it divides by, and whether it is defined.

    Mixed into results with ``source_logit_diff`` and ``target_logit_diff`` (`SiteEffects`,
    ``path-patch``): below `MIN_RECOVERY_GAP` their tables and figures show no recovery.
    """

    source_logit_diff: float
    target_logit_diff: float

    @property
    def gap(self) -> float:
        """The recovery's denominator, LD_source - LD_target (logits)."""
        return self.source_logit_diff - self.target_logit_diff

    @property
    def recovery_defined(self) -> bool:
        """Whether |gap| reaches `MIN_RECOVERY_GAP`; if not, no recovery is reported."""
        return abs(self.gap) >= MIN_RECOVERY_GAP

    def undefined_note(self) -> str:
        """Why the recoveries are not shown (empty when they are defined)."""
        if self.recovery_defined:
            return ""
        return (
            f"recovery undefined: |LD_source - LD_target| = {abs(self.gap):.3g} < {MIN_RECOVERY_GAP} logits "
            "(the model barely tells the inputs apart; see logit_diff)"
        )

    def table(self, rows: int = 12) -> str:
        """The compact text table, headed by why recoveries are undefined if they are."""
        note = self.undefined_note()
        return (note + "\n" if note else "") + super().table(rows)

    def mark_undefined(self, fig: go.Figure) -> None:
        """Say in `fig` that its recoveries are undefined, if they are."""
        if not self.recovery_defined:
            fig.add_annotation(
                text=self.undefined_note(),
                xref="paper",
                yref="paper",
                x=0.5,
                y=1.0,
                showarrow=False,
                yanchor="bottom",
                font={"color": "firebrick"},
            )


@dataclass(frozen=True)
class PairEffects(RecoveryGap, Result):
    """What every pair-patching result holds (``patch``, ``attribute``, ``path-patch``), built by
    `from_pairs`; each adds the axes of its patches (sites, or senders and receivers).

    Attributes:
        split: The target split.
        source: ``"counterfactual"`` or the source split.
        n_pairs: Number of pairs measured.
        source_logit_diff: LD of the unpatched source runs.
        target_logit_diff: LD of the unpatched target runs.
        recovery: Normalised logit-difference recovery, [*patches].
        logit_diff: Patched logit difference, [*patches].
        recovery_low: Lower end of the recovery's bootstrap interval, [*patches].
        recovery_high: Upper end, [*patches].
        logit_diff_low: Lower end of the patched logit difference's interval, [*patches].
        logit_diff_high: Upper end, [*patches].
        p_value: Permutation p-value per patch, [*patches] (NaN without permutations).
        per_example: Patched logit difference of every pair, [*patches, n_pairs].
        source_per_example: Unpatched source logit difference of every pair, [n_pairs].
        target_per_example: Unpatched target logit difference of every pair, [n_pairs].
    """

    split: str
    source: str
    n_pairs: int
    source_logit_diff: float
    target_logit_diff: float
    recovery: Tensor
    logit_diff: Tensor
    recovery_low: Tensor
    recovery_high: Tensor
    logit_diff_low: Tensor
    logit_diff_high: Tensor
    p_value: Tensor
    per_example: Tensor
    source_per_example: Tensor
    target_per_example: Tensor

    @classmethod
    def from_pairs(
        cls,
        subject: Subject,
        params: Any,
        pairs: PatchPairs,
        unpatched: Any,
        stats: EffectStats,
        *,
        logit_diff: Tensor,
        recovery: Tensor,
        per_example: Tensor,
        **fields: Any,
    ) -> Any:
        """The result of a pair-patching analysis: the fields every one shares, and its own `fields`.

        Args:
            subject: What was patched (its checkpoint's step is kept).
            params: `PairParams` (stored with the result; ``split`` and ``source`` are shown).
            pairs: The pairs measured.
            unpatched: Holds the unpatched runs' ``source_logit_diff`` and ``target_logit_diff``
                (floats) and ``source_per_example`` and ``target_per_example`` ([n_pairs]).
            stats: `effect_stats` of `per_example`.
            logit_diff: Patched logit difference, [*patches].
            recovery: Its normalised recovery, [*patches].
            per_example: Patched logit difference of every pair, [*patches, n_pairs].
            **fields: The analysis's own fields (sites, senders, accuracies, ...).
        """
        return cls(
            params=to_dict(params),
            step=subject.step,
            split=params.split,
            source=params.source,
            n_pairs=len(pairs),
            source_logit_diff=unpatched.source_logit_diff,
            target_logit_diff=unpatched.target_logit_diff,
            logit_diff=logit_diff,
            recovery=recovery,
            recovery_low=stats.recovery_low,
            recovery_high=stats.recovery_high,
            logit_diff_low=stats.logit_diff_low,
            logit_diff_high=stats.logit_diff_high,
            p_value=stats.p_value,
            per_example=per_example,
            source_per_example=unpatched.source_per_example,
            target_per_example=unpatched.target_per_example,
            **fields,
        )


@dataclass(frozen=True)
class SiteEffects(PairEffects):
    """Effects of every patched site, flattened site after site (row-major within a site): the
    `PairEffects` fields with ``[*patches] = [n_patches]``.

    Attributes:
        sites: Site names, in order.
        axes: Axis names per site (e.g. ``{"z": ["layer", "head"]}``).
        shapes: Effect tensor shape per site.
    """

    effect_keys: ClassVar[tuple[str, ...]] = STAT_KEYS
    what: ClassVar[str] = "Patching"
    sites: list[str]
    axes: dict[str, list[str]]
    shapes: dict[str, list[int]]

    def site(self, name: str) -> dict[str, Tensor]:
        """Every per-patch tensor of one site (`effect_keys`), in the site's own shape."""
        if name not in self.sites:
            raise ConfigError(f"site {name!r} was not patched", f"patched: {', '.join(self.sites)}")
        sizes = [int(np.prod(self.shapes[s])) for s in self.sites]
        i = self.sites.index(name)
        part = slice(sum(sizes[:i]), sum(sizes[: i + 1]))
        return {k: getattr(self, k)[part].reshape(self.shapes[name]) for k in self.effect_keys}

    def to_frame(self) -> pd.DataFrame:
        """One row per patch (site, layer, head, pos), largest |recovery| first."""
        rows = []
        for name in self.sites:
            values = self.site(name)
            for index in np.ndindex(*self.shapes[name]):
                row = {"site": name, "layer": pd.NA, "head": pd.NA, "pos": pd.NA}
                row.update(dict(zip(self.axes[name], index)))
                row.update({k: v[index].item() for k, v in values.items()})
                if not self.recovery_defined:
                    row.update({k: float("nan") for k in ("recovery", "recovery_low", "recovery_high")})
                row["recovery_defined"] = self.recovery_defined
                rows.append(row)
        frame = pd.DataFrame(rows).astype({"layer": "Int64", "head": "Int64", "pos": "Int64"})
        order = frame["recovery"].abs().fillna(-1.0).sort_values(ascending=False, kind="stable").index
        return frame.loc[order].reset_index(drop=True)

    def figure(self) -> go.Figure:
        """Per site, a heatmap of recovery (layer x position, layer x head, or head x position),
        and below it every patch's recovery with its bootstrap interval as error bars.
        """
        fig = make_subplots(rows=2, cols=len(self.sites), subplot_titles=self.sites, row_heights=[0.6, 0.4])
        ci = self.params.get("ci", 0.95)
        for col, name in enumerate(self.sites, start=1):
            values = self.site(name)
            if not self.recovery_defined:  # blank cells and bars: there is no recovery to show
                values = {k: v * float("nan") if k.startswith("recovery") else v for k, v in values.items()}
            fig.add_trace(_heatmap(name, self.axes[name], values["recovery"]), row=1, col=col)
            add_interval_row(fig, 2, col, patch_labels(self.axes[name], self.shapes[name]), values, ci)
            x_title = "head" if self.axes[name][-1] == "head" and len(self.axes[name]) == 2 else "position"
            fig.update_xaxes(title_text=x_title, row=1, col=col)
            fig.update_yaxes(
                title_text="layer" if len(self.axes[name]) == 2 else "layer, head",
                row=1,
                col=col,
                autorange="reversed",
            )
        step = f", step {self.step}" if self.step is not None else ""
        fig.update_layout(
            coloraxis={"colorscale": "RdBu", "cmid": 0, "colorbar": {"title": "recovery"}}, showlegend=False
        )
        fig.update_layout(
            title=f"{self.what} {self.source} into {self.split}{step}: logit-difference recovery "
            f"({self.n_pairs} pairs; error bars: {ci:.0%} bootstrap intervals)"
        )
        self.mark_undefined(fig)
        return fig


def _heatmap(site: str, axes: list[str], values: Tensor) -> go.Heatmap:
    """One site's recovery as a heatmap; [layer, pos, head] is drawn as (layer, head) x pos."""
    if len(axes) == 3:  # z_pos: rows L{l}H{h}, columns positions
        layers, n_pos, heads = values.shape
        z = values.permute(0, 2, 1).reshape(layers * heads, n_pos)
        y = [f"L{layer}H{h}" for layer in range(layers) for h in range(heads)]
        x, names = list(range(n_pos)), ("layer, head", "position")
    else:
        z, y, x = values, list(range(values.shape[0])), list(range(values.shape[1]))
        names = ("layer", axes[1] if axes[1] == "head" else "position")
    return go.Heatmap(
        z=z.tolist(),
        x=x,
        y=y,
        coloraxis="coloraxis",
        hovertemplate=(
            f"site {site}<br>{names[0]} %{{y}}<br>{names[1]} %{{x}}<br>recovery %{{z:.3f}}<extra></extra>"
        ),
    )
