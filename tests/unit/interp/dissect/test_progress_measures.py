"""Progress measures of modular addition (`interp.dissect.progress_measures`): golden values on
signals built from known frequencies, and the identities the definitions imply.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.dissect import progress_measures as pm
from interp.errors import ConfigError

P = 13


def _wave(k: int, phase: float = 0.0, p: int = P) -> torch.Tensor:
    return torch.cos(2 * math.pi * k * torch.arange(p, dtype=torch.float64) / p + phase)


@pytest.mark.parametrize("p", [7, 12, 13])
def test_fourier_basis_is_orthonormal_and_named(p):
    basis, names = pm.fourier_basis(p)
    torch.testing.assert_close(basis @ basis.T, torch.eye(p, dtype=torch.float64), atol=1e-12, rtol=0)
    assert names[:3] == ["const", "cos 1", "sin 1"] and len(names) == p
    assert (names[-1] == f"cos {p // 2}") == (p % 2 == 0), "an even modulus ends with the Nyquist cosine"


def test_power_spectrum_of_pure_waves_sits_at_their_frequencies():
    weights = torch.stack([3 * _wave(2, 0.4), _wave(5, 1.0), _wave(5, -2.0)], 1)  # [p, 3]
    power = pm.frequency_power(weights)
    assert power.shape == (P // 2,)
    expected = torch.zeros(P // 2, dtype=torch.float64)
    expected[1], expected[4] = 9 * P / 2, 2 * P / 2  # ||a cos||^2 = a^2 p / 2
    torch.testing.assert_close(power, expected, atol=1e-9, rtol=0)
    # mean power 71.5 / 6: both waves exceed it, only the strong one exceeds 3 times it
    assert pm.key_frequencies(power, ratio=1.0) == [2, 5] and pm.key_frequencies(power) == [2]


def test_key_frequencies_fall_back_to_the_strongest_and_parse_given_lists():
    assert pm.key_frequencies(torch.ones(6)) == [1], (
        "flat spectrum: no key above the ratio, the largest is kept"
    )
    assert pm.parse_frequencies("auto", P) is None
    assert pm.parse_frequencies("5, 2,5", P) == [2, 5]
    for bad in ("0", "7", "two", ""):
        with pytest.raises(ConfigError, match="frequencies"):
            pm.parse_frequencies(bad, P)


def _logits_of(keys: list[int], scale: float = 4.0, p: int = P) -> torch.Tensor:
    """``sum_k cos(w_k (x + y - c))`` over the grid, rows x * p + y, columns c."""
    s = (torch.arange(p)[:, None] + torch.arange(p)[None, :]).flatten().double()
    c = torch.arange(p).double()
    return scale * sum(torch.cos(2 * math.pi * k * (s[:, None] - c[None]) / p) for k in keys)


def test_restricted_and_excluded_logits_split_a_signal_by_frequency():
    key_part, other = _logits_of([2, 5]), _logits_of([3], scale=1.5)
    logits = key_part + other + torch.linspace(-1, 1, P).double()  # plus a per-class offset
    restricted = pm.restricted_logits(logits, P, [2, 5])
    torch.testing.assert_close(restricted, key_part + torch.linspace(-1, 1, P).double(), atol=1e-9, rtol=0)
    torch.testing.assert_close(pm.excluded_logits(logits, P, [2, 5]), logits - key_part, atol=1e-9, rtol=0)


@settings(max_examples=25, deadline=None)
@given(p=st.integers(5, 16), seed=st.integers(0, 1000))
def test_restricted_plus_excluded_is_the_logits_and_every_frequency_restricts_nothing(p, seed):
    logits = torch.randn(p * p, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    keys = [1 + seed % (p // 2)]
    total = (
        pm.restricted_logits(logits, p, keys)
        + pm.excluded_logits(logits, p, keys)
        - logits.mean(0, keepdim=True)
    )
    torch.testing.assert_close(total, logits, atol=1e-9, rtol=0)
    # Every frequency of x + y: only the parts that depend on x - y (and not on x + y) are lost.
    every = pm.restricted_logits(logits, p, list(range(1, p // 2 + 1)))
    s = (torch.arange(p)[:, None] + torch.arange(p)[None, :]).flatten() % p
    means = torch.stack([logits[s == v].mean(0) for v in range(p)])
    torch.testing.assert_close(every, means[s], atol=1e-9, rtol=0)


def test_neuron_fve_of_products_of_one_frequency():
    # (cos a + cos b)^2 = 1 + cos(2a)/2 + cos(2b)/2 + cos(a + b) + cos(a - b): variance 1 + 1/4, of
    # which 1 is in frequency k (products) and 1/4 in frequency 2k.
    x, y = torch.arange(P).repeat_interleave(P), torch.arange(P).repeat(P)
    acts = []
    for k, phase in ((3, 0.3), (3, 1.2), (4, -0.5)):
        w = 2 * math.pi * k / P
        acts.append((torch.cos(w * x + phase) + torch.cos(w * y - phase)).double().square())
    acts.append(torch.cos(2 * math.pi * 2 * x / P).double() + 5)  # linear in x: all variance at frequency 2
    fve, best, best_fve = pm.neuron_frequency_fve(torch.stack(acts, 1), P)
    assert fve.shape == (P // 2, 4)
    assert best.tolist() == [3, 3, 4, 2]
    torch.testing.assert_close(best_fve, torch.tensor([0.8, 0.8, 0.8, 1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(
        fve[6 - 1, 0], torch.tensor(0.2), atol=1e-6, rtol=0, msg="cos(2a) of k = 3: frequency 6"
    )
    torch.testing.assert_close(fve.sum(0)[:3], torch.ones(3), atol=1e-6, rtol=0)
