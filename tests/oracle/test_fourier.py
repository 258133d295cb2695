"""Oracle: `interp.dissect.fourier` against an explicit DFT written as cosine and sine sums (numpy)."""

from __future__ import annotations

import numpy as np
import torch

from interp.dissect.fourier import fourier_amplitudes, ipr


def _explicit_ipr(w: np.ndarray) -> float:
    n = len(w)
    x = np.arange(n)
    power = []
    for f in range(1, n // 2 + 1):  # DC dropped; f and n - f folded (both halves of one real sinusoid)
        re, im = (w * np.cos(2 * np.pi * f * x / n)).sum(), (w * np.sin(2 * np.pi * f * x / n)).sum()
        power.append((re**2 + im**2) * (1 if 2 * f == n else 2))
    a = np.sqrt(power)
    return float(((a / np.linalg.norm(a)) ** 4).sum())


def test_ipr_matches_explicit_dft_on_random_weights():
    rng = np.random.default_rng(0)
    for n in (97, 10, 13):
        w = rng.normal(size=(n, 6))
        got = ipr(fourier_amplitudes(torch.from_numpy(w))).numpy()
        expected = [_explicit_ipr(w[:, k]) for k in range(6)]
        np.testing.assert_allclose(got, expected, rtol=1e-10)
