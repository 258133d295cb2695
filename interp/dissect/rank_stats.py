"""Rank correlations in torch: Spearman's rho and the rank-biserial correlation.

Circuit fingerprints of attention heads (docs/concepts/fingerprints.md) are rank
correlations: how strongly a head's attention score ranks keys by token magnitude (Spearman's
rho against the token value), and how strongly what a head writes separates tokens by their
residue mod m. Both are computed here on tensors, vectorised over leading batch dimensions
(one correlation per layer and head in a single call), with average ranks for ties so that the
results equal `scipy.stats.spearmanr` and `scipy.stats.mannwhitneyu`.

Computation is in float64: ranks of ~10^5 pooled entries lose precision in float32.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float, Real
from torch import Tensor


def rankdata(x: Real[Tensor, "... n"]) -> Float[Tensor, "... n"]:
    """Average ranks (1-based, ties share the mean of their ranks) along the last dimension.

    Equal to `scipy.stats.rankdata(x, method="average", axis=-1)` for finite inputs.

    Args:
        x: Values, shape [..., n].

    Returns:
        Ranks in float64, shape [..., n].
    """
    x = x.detach().double().contiguous()
    ordered = x.sort(dim=-1).values
    # Elements below x, and elements at most x: a tie block spans ranks lo+1..hi, mean (lo+hi+1)/2.
    lo = torch.searchsorted(ordered, x, right=False)
    hi = torch.searchsorted(ordered, x, right=True)
    return (lo + hi + 1).double() / 2


def pearson(x: Float[Tensor, "... n"], y: Float[Tensor, "... n"]) -> Float[Tensor, "..."]:
    """Pearson correlation along the last dimension (NaN where either input is constant)."""
    x, y = torch.broadcast_tensors(x.double(), y.double())
    dx = x - x.mean(-1, keepdim=True)
    dy = y - y.mean(-1, keepdim=True)
    return (dx * dy).sum(-1) / (dx.square().sum(-1) * dy.square().sum(-1)).sqrt()


def spearman(x: Real[Tensor, "... n"], y: Real[Tensor, "... n"]) -> Float[Tensor, "..."]:
    """Spearman's rank correlation along the last dimension, with average ranks for ties.

    Equal to `scipy.stats.spearmanr(x, y).statistic` for 1-D inputs; `x` and `y` broadcast, so
    one call gives one rho per leading index (e.g. per layer and head).

    Args:
        x: First variable, shape [..., n].
        y: Second variable, broadcastable to `x`.

    Returns:
        rho in float64, shape [...]; NaN where either input is constant or holds a NaN.
    """
    x, y = torch.broadcast_tensors(torch.as_tensor(x), torch.as_tensor(y))
    rho = pearson(rankdata(x), rankdata(y))
    # Sorting puts NaN last and would rank it silently; scipy propagates it, so do we.
    for t in (x, y):
        if t.is_floating_point():
            rho = rho.masked_fill(t.isnan().any(-1), float("nan"))
    return rho


def rank_biserial(x: Float[Tensor, "... n"], positive: Bool[Tensor, "... n"]) -> Float[Tensor, "..."]:
    """Rank-biserial correlation of `x` with a two-valued variable, ``2 * AUC - 1``.

    This is Spearman's rho for a dichotomous second variable, rescaled so that perfect
    separation gives exactly +1 (every positive above every negative) or -1. Plain Spearman
    cannot reach 1 against a binary variable unless `x` is itself two-valued (with equal groups
    its maximum tends to sqrt(3)/2), which would make "the head encodes parity perfectly"
    unreadable. Ties in `x` count one half, as in the Mann-Whitney U statistic:
    ``U = sum(ranks of positives) - n1 (n1 + 1) / 2`` and ``AUC = U / (n1 n0)``.

    Args:
        x: Values, shape [..., n].
        positive: Membership of the positive class, broadcastable to `x`.

    Returns:
        r in [-1, 1], float64, shape [...]; NaN where a class is empty.
    """
    x, positive = torch.broadcast_tensors(torch.as_tensor(x), torch.as_tensor(positive))
    ranks = rankdata(x)
    pos = positive.double()
    n1 = pos.sum(-1)
    n0 = pos.shape[-1] - n1
    u = (ranks * pos).sum(-1) - n1 * (n1 + 1) / 2
    return 2 * u / (n1 * n0) - 1
