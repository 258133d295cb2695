"""Analysis ``attribute``: attribution patching, the gradient estimate of activation patching.

The same pairs, sites, metric and layouts as ``patch`` (`analyses.effects.pairs_for`,
`interp.dissect.patching.SITES`), but every effect is estimated to first order from one
forward pass on the sources, one on the targets and one backward pass
(`interp.dissect.attribution`), so every site of a model costs about what one patched run
costs. With ``compare``, activation patching runs on the same pairs too, and the result holds
both and their Pearson correlation per site (over the site's patches): how far the linear
estimate can be trusted on this checkpoint. Uncertainty as in ``patch``: per-pair estimates,
bootstrap intervals and (``permutations > 0``) a permutation test over re-pairings.

Wraps `interp.dissect.attribution` and `interp.dissect.patching` (the table in docs/architecture.md
pairs every dissection module with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import plotly.graph_objects as go
import torch
from torch import Tensor, nn

from analyses.base import Analysis, param
from analyses.effects import (
    STAT_KEYS,
    PairParams,
    SiteEffects,
    effect_stats,
    pairs_for,
)
from analyses.registry import REGISTRY
from analyses.subject import Subject
from interp.dissect.attribution import AttributionSweep, attribution_sweep
from interp.dissect.hooks import has_mlps
from interp.dissect.patching import SITES, parse_sites, patch_sweep
from interp.dissect.rank_stats import pearson

DEFINITION = """\
For a site index with activation slice a, activation patching measures
LD(target run with a := a_source) - LD(target run), where LD is the logit difference between the
source and the target label at the readout position. Attribution patching replaces it by its
first-order Taylor estimate at the target run, (dLD/da) . (a_source - a_target), summed over the
slice's elements, for every site and index at once from two forward passes and one backward pass.
It is exact where LD is linear in a (the last layer's resid_post and mlp_out without a final
LayerNorm) and an approximation elsewhere; --compare measures its Pearson correlation with real
activation patching on the same pairs. Intervals: percentile bootstrap over pairs; p-values: a
permutation test re-running the estimate on pairs re-paired at random within equal labels."""
REFERENCE = (
    'Neel Nanda, "Attribution Patching: Activation Patching At Industrial Scale" (2023); '
    'Syed, Rager and Conmy, "Attribution Patching Outperforms Automated Circuit Discovery" (2023).'
)


@dataclass(frozen=True)
class Params(PairParams):
    """Parameters of ``attribute``."""

    sites: str = param(
        "all",
        "Comma-separated sites (resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, z_pos, pattern) "
        "or 'all'.",
    )
    compare: bool = param(
        False, "Also run activation patching on the same pairs and report the correlation per site."
    )


@dataclass(frozen=True)
class AttributeResult(SiteEffects):
    """Attribution-patching estimates of every site (see `SiteEffects` for the shared fields:
    ``logit_diff`` and ``recovery`` are the estimates).

    Attributes:
        patched_logit_diff: Activation patching's logit difference per patch, [n_patches]
            (NaN unless ``compare``).
        patched_recovery: Its recovery, [n_patches] (NaN unless ``compare``).
        correlation: Pearson correlation of the estimated and the patched logit differences,
            per site and over ``"all"`` patches (empty unless ``compare``).
    """

    analysis: ClassVar[str] = "attribute"
    what: ClassVar[str] = "Attribution patching"
    effect_keys: ClassVar[tuple[str, ...]] = (*STAT_KEYS, "patched_logit_diff", "patched_recovery")
    patched_logit_diff: Tensor
    patched_recovery: Tensor
    correlation: dict[str, float]

    def figure(self) -> go.Figure:
        """`SiteEffects.figure`, with the correlations with activation patching in the title."""
        fig = super().figure()
        if self.correlation:
            text = ", ".join(f"{site} {r:.2f}" for site, r in self.correlation.items())
            fig.update_layout(title=f"{fig.layout.title.text}<br>Pearson r with activation patching: {text}")
        return fig


def _sites(text: str, model: nn.Module) -> list[str]:
    if text.strip() != "all":
        return list(parse_sites(text))
    # An attention-only TransformerLens model has no MLP, so no resid_mid or mlp_out to patch.
    return [s for s in SITES if has_mlps(model) or s not in ("resid_mid", "mlp_out")]


def _flat(sweep: Any, sites: list[str], key: str) -> Tensor:
    return torch.cat([getattr(sweep.effects[s], key).flatten() for s in sites])


def _correlations(estimate: AttributionSweep, actual: Any, sites: list[str]) -> dict[str, float]:
    """Pearson r per site (over its patches) and over all patches; NaN where either is constant."""
    out = {
        s: pearson(estimate.effects[s].logit_diff.flatten(), actual.effects[s].logit_diff.flatten()).item()
        for s in sites
    }
    out["all"] = pearson(_flat(estimate, sites, "logit_diff"), _flat(actual, sites, "logit_diff")).item()
    return {k: (None if v != v else v) for k, v in out.items()}  # JSON has no NaN


def compute(subject: Subject, params: Params) -> AttributeResult:
    """Estimate every site of `params.sites` by attribution patching (and compare if asked)."""
    sites = _sites(params.sites, subject.model)
    pairs = pairs_for(subject, params)
    sweep = attribution_sweep(subject.model, pairs, sites)
    per_example = torch.cat([sweep.effects[s].per_example.flatten(0, -2) for s in sites])
    stats = effect_stats(
        per_example,
        sweep.source_per_example,
        sweep.target_per_example,
        params,
        lambda other: _flat(attribution_sweep(subject.model, other, sites), sites, "logit_diff"),
        pairs,
    )
    nan = torch.full((len(per_example),), torch.nan)
    patched, patched_recovery, correlation = nan, nan, {}
    if params.compare:
        actual = patch_sweep(subject.model, pairs, sites)
        patched, patched_recovery = _flat(actual, sites, "logit_diff"), _flat(actual, sites, "recovery")
        correlation = _correlations(sweep, actual, sites)
    return AttributeResult.from_pairs(
        subject,
        params,
        pairs,
        sweep,
        stats,
        logit_diff=_flat(sweep, sites, "logit_diff"),
        recovery=_flat(sweep, sites, "recovery"),
        per_example=per_example,
        sites=sites,
        axes={s: list(sweep.effects[s].axes) for s in sites},
        shapes={s: list(sweep.effects[s].logit_diff.shape) for s in sites},
        patched_logit_diff=patched,
        patched_recovery=patched_recovery,
        correlation=correlation,
    )


ANALYSIS = Analysis(
    name="attribute",
    summary=REGISTRY["attribute"][1],
    params=Params,
    compute=compute,
    result=AttributeResult,
    definition=DEFINITION,
    reference=REFERENCE,
)
