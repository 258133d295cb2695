"""Uncertainty of patching effects: bootstrap intervals over pairs, and a re-pairing permutation test.

Every patching effect in `interp.dissect` (activation, attribution and path patching) is a
mean over example pairs of a per-pair patched logit difference ``LD_i``; the recovery is the
ratio ``(mean LD_patched - mean LD_target) / (mean LD_source - mean LD_target)``. Keeping the
per-pair values makes two kinds of uncertainty cheap:

* **Bootstrap interval** (Efron and Tibshirani, *An Introduction to the Bootstrap*): resample the
  pairs with replacement `n_boot` times; each resample gives a mean patched logit difference and
  a recovery recomputed from the *same* resample's source and target means (the ratio is
  resampled whole, not its parts apart). The interval is the percentile interval at level `ci`.
  It says how much the effect would move with other examples from the same distribution.
* **Permutation test** (Good, *Permutation, Parametric and Bootstrap Tests of Hypotheses*): the
  null hypothesis is that the effect does not depend on *which* source example is paired with
  which target, only on the source distribution. Each permutation shuffles the source rows
  among pairs that share both labels (so every pair's metric direction, and the unpatched
  source and target logit differences, are unchanged), and the patch is re-run on the shuffled
  pairs. The two-sided p-value is
  ``(1 + #{k : |null_k - mean(null)| >= |observed - mean(null)|}) / (1 + K)``: small when the
  patched value on the true pairing is atypical of random pairings.

The functions are tensors in, tensors out; `effect_statistics` combines them for one effect
table, and `permutation_null` re-runs any patching function on re-paired inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.dissect.patching import PatchPairs
from interp.errors import ConfigError


def bootstrap_counts(n: int, n_boot: int, seed: int = 0) -> Float[Tensor, "n_boot n"]:
    """How often each of `n` examples is drawn in each of `n_boot` resamples (rows sum to `n`)."""
    rng = np.random.default_rng([seed, 0xB007])
    draws = torch.from_numpy(rng.integers(0, n, size=(n_boot, n)))
    return torch.zeros(n_boot, n).scatter_add_(1, draws, torch.ones(n_boot, n))


def bootstrap_means(
    per_example: Float[Tensor, "*m n"], counts: Float[Tensor, "n_boot n"]
) -> Float[Tensor, "*m n_boot"]:
    """The mean of `per_example` over its last axis in every resample given by `counts`."""
    return per_example.double() @ counts.double().T / counts.shape[1]


def percentile_interval(
    samples: Float[Tensor, "*m n_boot"], level: float
) -> tuple[Float[Tensor, "*m"], Float[Tensor, "*m"]]:
    """The central `level` interval of `samples` along the last axis (NaN samples ignored)."""
    if not 0 < level < 1:
        raise ConfigError(f"ci={level!r} is not a confidence level", "use a number in (0, 1), e.g. 0.95")
    tail = (1 - level) / 2
    q = torch.tensor([tail, 1 - tail], dtype=samples.dtype)
    low, high = torch.nanquantile(samples, q, dim=-1)
    return low.float(), high.float()


def repairing(pairs: PatchPairs, seed: int) -> Tensor:
    """A random order of the source rows that only swaps rows whose pairs share both labels.

    Returns:
        int64 [batch]: row i of the re-paired set takes source row ``order[i]``.
    """
    rng = np.random.default_rng([seed, 0x9E9A])
    keys = (pairs.source_labels * (int(pairs.target_labels.max()) + 1) + pairs.target_labels).numpy()
    order = np.arange(len(keys))
    for key in np.unique(keys):
        rows = np.flatnonzero(keys == key)
        order[rows] = rows[rng.permutation(len(rows))]
    return torch.from_numpy(order)


def repaired(pairs: PatchPairs, order: Tensor) -> PatchPairs:
    """`pairs` with source row ``order[i]`` paired with target row i (labels as `repairing` keeps them)."""
    return PatchPairs(
        pairs.source_tokens[order], pairs.target_tokens, pairs.source_labels[order], pairs.target_labels
    )


def permutation_null(
    measure: Callable[[PatchPairs], Float[Tensor, "*m"]], pairs: PatchPairs, permutations: int, seed: int = 0
) -> Float[Tensor, " k *m"]:
    """`measure` (a mean patched logit difference per patch) on `permutations` re-pairings of `pairs`."""
    return torch.stack([measure(repaired(pairs, repairing(pairs, seed + k))) for k in range(permutations)])


def permutation_p_values(observed: Float[Tensor, "*m"], null: Float[Tensor, " k *m"]) -> Float[Tensor, "*m"]:
    """Two-sided p-values of `observed` against the `null` samples (see the module docstring);
    NaN where `observed` is NaN (a patch that does not exist, such as a path with no edge).
    """
    centre = null.mean(0)
    extreme = ((null - centre).abs() >= (observed - centre).abs() - 1e-12).sum(0)
    p = ((1 + extreme) / (1 + null.shape[0])).float()
    return torch.where(observed.isnan(), torch.nan, p)


@dataclass(frozen=True)
class EffectStats:
    """Bootstrap intervals and permutation p-values of a table of patching effects.

    Attributes:
        logit_diff_low: Lower end of the patched logit difference's interval, [*m].
        logit_diff_high: Upper end, [*m].
        recovery_low: Lower end of the recovery's interval, [*m].
        recovery_high: Upper end, [*m].
        p_value: Permutation p-value of each effect, [*m]; NaN when no permutations were run.
    """

    logit_diff_low: Tensor
    logit_diff_high: Tensor
    recovery_low: Tensor
    recovery_high: Tensor
    p_value: Tensor


def effect_statistics(
    per_example: Float[Tensor, "*m n"],
    source: Float[Tensor, " n"],
    target: Float[Tensor, " n"],
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    null: Float[Tensor, " k *m"] | None = None,
) -> EffectStats:
    """Intervals (and, given a `null`, p-values) of patched logit differences and recoveries.

    Args:
        per_example: Patched logit difference of every pair for every patch, [*m, n].
        source: Unpatched source logit difference of every pair, [n].
        target: Unpatched target logit difference of every pair, [n].
        n_boot: Bootstrap resamples (at least 1).
        level: Confidence level of the intervals.
        seed: Seed of the resamples.
        null: Mean patched logit differences on re-paired inputs (`permutation_null`), [k, *m].

    Raises:
        ConfigError: For ``n_boot < 1`` or a level outside (0, 1).
    """
    if n_boot < 1:
        raise ConfigError(f"n_boot={n_boot!r} must be a positive number of resamples", "e.g. 1000")
    counts = bootstrap_counts(per_example.shape[-1], n_boot, seed)
    patched, src, tgt = (bootstrap_means(x, counts) for x in (per_example, source, target))
    ld_low, ld_high = percentile_interval(patched, level)
    denominator = src - tgt
    ratio = torch.where(denominator != 0, (patched - tgt) / denominator, torch.nan)
    rec_low, rec_high = percentile_interval(ratio, level)
    observed = per_example.mean(-1)
    p = (
        permutation_p_values(observed, null)
        if null is not None and len(null)
        else torch.full_like(observed, torch.nan)
    )
    return EffectStats(ld_low, ld_high, rec_low, rec_high, p)
