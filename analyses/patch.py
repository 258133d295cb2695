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
uncertainty (`interp.dissect.patch_stats`, through `analyses.effects`): the per-pair patched
logit differences are kept, a bootstrap over pairs gives intervals for the logit difference
and the recovery, and with ``permutations > 0`` a permutation test re-runs the patch on
randomly re-paired examples.

Wraps `interp.dissect.patching` (the table in docs/architecture.md pairs every dissection module
with the analyses that wrap it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

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
from interp.dissect.patching import PatchSweep, parse_sites, patch_sweep

__all__ = ["ANALYSIS", "Params", "PatchResult", "compute", "pairs_for"]

DEFINITION = """\
Each target run (the corrupted input) is repeated with one activation slice overwritten by its
value on the paired source run (the clean input). The effect of a slice is the patched logit
difference LD = mean over pairs of logit[source label] - logit[target label] at the readout
position, and its recovery (LD_patched - LD_target) / (LD_source - LD_target): 0 when the patch
changes nothing, 1 when the run reads like the source run. The per-pair values are kept; the
intervals are percentile bootstrap intervals over pairs (the recovery resampled as a whole), and
the p-values come from a permutation test whose null re-pairs sources and targets at random
within equal labels and re-runs the patch."""
REFERENCE = (
    'Meng, Bau, Andonian and Belinkov, "Locating and Editing Factual Associations in GPT" (2022); '
    'Zhang and Nanda, "Towards Best Practices of Activation Patching in Language Models: Metrics and '
    'Methods" (2024); Efron and Tibshirani, "An Introduction to the Bootstrap" (1993).'
)


@dataclass(frozen=True)
class Params(PairParams):
    """Parameters of ``patch``."""

    sites: str = param(
        "resid_pre,z",
        "Comma-separated sites: resid_pre, resid_mid, resid_post, attn_out, mlp_out, z, z_pos, pattern.",
    )


@dataclass(frozen=True)
class PatchResult(SiteEffects):
    """Activation-patching effects of every site, flattened site after site (see `SiteEffects`
    for the shared fields).

    Attributes:
        source_accuracy: Source runs' accuracy (against source labels).
        target_accuracy: Target runs' accuracy against the source labels.
        accuracy: Patched accuracy against the source labels, [n_patches].
    """

    analysis: ClassVar[str] = "patch"
    effect_keys: ClassVar[tuple[str, ...]] = (*STAT_KEYS, "accuracy")
    source_accuracy: float
    target_accuracy: float
    accuracy: Tensor


def _flat_logit_diff(sweep: PatchSweep, sites: list[str]) -> Tensor:
    return torch.cat([sweep.effects[s].logit_diff.flatten() for s in sites])


def compute(subject: Subject, params: Params) -> PatchResult:
    """Patch every site of `params.sites` from the source runs into the target runs."""
    sites = list(parse_sites(params.sites))
    pairs = pairs_for(subject, params)
    sweep = patch_sweep(subject.model, pairs, sites)
    effects = [sweep.effects[s] for s in sites]
    per_example = torch.cat([e.per_example.flatten(0, -2) for e in effects])
    stats = effect_stats(
        per_example,
        sweep.source_per_example,
        sweep.target_per_example,
        params,
        lambda other: _flat_logit_diff(patch_sweep(subject.model, other, sites), sites),
        pairs,
    )
    return PatchResult.from_pairs(
        subject,
        params,
        pairs,
        sweep,
        stats,
        logit_diff=_flat_logit_diff(sweep, sites),
        recovery=torch.cat([e.recovery.flatten() for e in effects]),
        per_example=per_example,
        sites=sites,
        axes={e.site: list(e.axes) for e in effects},
        shapes={e.site: list(e.recovery.shape) for e in effects},
        source_accuracy=sweep.source_accuracy,
        target_accuracy=sweep.target_accuracy,
        accuracy=torch.cat([e.accuracy.flatten() for e in effects]),
    )


ANALYSIS = Analysis(
    name="patch",
    summary=REGISTRY["patch"][1],
    params=Params,
    compute=compute,
    result=PatchResult,
    definition=DEFINITION,
    reference=REFERENCE,
)
