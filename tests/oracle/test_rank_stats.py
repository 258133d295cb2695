"""Oracle: `interp.dissect.rank_stats` against scipy (ties, batching) and its invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from interp.dissect.rank_stats import rank_biserial, rankdata, spearman


def test_rankdata_equals_scipy_average_ranks_with_ties():
    x = torch.randint(0, 6, (4, 7, 40))
    expected = scipy.stats.rankdata(x.numpy(), method="average", axis=-1)
    np.testing.assert_array_equal(rankdata(x).numpy(), expected)


def test_spearman_equals_scipy_on_tied_random_data_batched():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 5, (3, 4, 60), generator=gen).float()
    y = torch.randint(0, 9, (3, 4, 60), generator=gen)
    rho = spearman(x, y)
    assert rho.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            expected = scipy.stats.spearmanr(x[i, j].numpy(), y[i, j].numpy()).statistic
            assert rho[i, j].item() == pytest.approx(expected, abs=1e-12)


def test_spearman_broadcasts_and_propagates_nan():
    x = torch.randn(2, 30)
    y = torch.arange(30.0)
    torch.testing.assert_close(spearman(x, y), torch.stack([spearman(row, y) for row in x]))
    x[1, 3] = float("nan")
    assert not spearman(x, y)[0].isnan() and spearman(x, y)[1].isnan()
    assert spearman(torch.ones(10), torch.arange(10.0)).isnan()  # constant input, as scipy


def test_rank_biserial_equals_mann_whitney_u():
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 7, (50,), generator=gen).double()
    positive = torch.rand(50, generator=gen) < 0.4
    n1, n0 = int(positive.sum()), int((~positive).sum())
    u = scipy.stats.mannwhitneyu(x[positive].numpy(), x[~positive].numpy()).statistic
    assert rank_biserial(x, positive).item() == pytest.approx(2 * u / (n1 * n0) - 1, abs=1e-12)
    # Perfect separation is exactly +-1 (where plain Spearman stays below 1).
    values = torch.arange(20.0)
    assert rank_biserial(values, values >= 10).item() == 1.0
    assert rank_biserial(values, values < 10).item() == -1.0
    assert spearman(values, (values >= 10).double()).item() < 0.9


samples = st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 4)), min_size=3, max_size=40)
MONOTONE = [lambda t: t * 3.0 + 7.0, lambda t: t**3, lambda t: torch.exp(t / 4), lambda t: torch.atan(t)]


@settings(max_examples=60, deadline=None)
@given(samples, st.sampled_from(range(len(MONOTONE))))
def test_spearman_matches_scipy_and_is_invariant_under_monotone_maps(pairs, which):
    x = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    y = torch.tensor([p[1] for p in pairs], dtype=torch.float64)
    assume(len(x.unique()) > 1 and len(y.unique()) > 1)
    rho = spearman(x, y).item()
    assert rho == pytest.approx(scipy.stats.spearmanr(x.numpy(), y.numpy()).statistic, abs=1e-12)
    assert spearman(MONOTONE[which](x), y).item() == pytest.approx(rho, abs=1e-12)
    assert spearman(-x, y).item() == pytest.approx(-rho, abs=1e-12)  # strictly decreasing map
    assert math.isfinite(rho) and -1 - 1e-12 <= rho <= 1 + 1e-12
