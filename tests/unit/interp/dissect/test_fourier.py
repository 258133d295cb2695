"""`interp.dissect.fourier`: IPR of pure sinusoids is 1, of flat spectra 1/F, joint spectra, edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from interp.dissect.fourier import dominant_frequency, fourier_amplitudes, ipr, joint_amplitudes, neuron_ipr


def _wave(n: int, f: int, phase: float = 0.3, amplitude: float = 2.0) -> torch.Tensor:
    x = torch.arange(n, dtype=torch.float64)
    return amplitude * torch.cos(2 * math.pi * f * x / n + phase)


@pytest.mark.parametrize("n", [97, 12])
@pytest.mark.parametrize("f", [1, 3, 5])
def test_pure_sinusoid_has_ipr_one_even_with_an_offset(n, f):
    w = _wave(n, f) + 0.7  # the DC offset is dropped
    assert ipr(fourier_amplitudes(w)).item() == pytest.approx(1.0, abs=1e-12)
    # f and n - f are the same real sinusoid: folding puts it in one bin either way
    assert ipr(fourier_amplitudes(_wave(n, n - f))).item() == pytest.approx(1.0, abs=1e-12)
    assert dominant_frequency(fourier_amplitudes(w)).item() == f


def test_nyquist_sinusoid_has_ipr_one():
    assert ipr(fourier_amplitudes(_wave(12, 6, phase=0.0))).item() == pytest.approx(1.0, abs=1e-12)


def test_unfolded_sinusoid_splits_its_power_over_f_and_n_minus_f():
    assert ipr(fourier_amplitudes(_wave(97, 4), fold=False)).item() == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("n", [97, 11])
def test_impulse_has_a_flat_spectrum_odd_n(n):
    # |F_f| = 1 for every f: folded, (n - 1) / 2 equal amplitudes -> IPR = 2 / (n - 1)
    w = torch.zeros(n, dtype=torch.float64)
    w[5] = 3.0
    a = fourier_amplitudes(w)
    assert a.shape == ((n - 1) // 2,)
    assert ipr(a).item() == pytest.approx(2 / (n - 1), rel=1e-12)
    # keeping DC and not folding: n equal magnitudes -> 1 / n
    assert ipr(fourier_amplitudes(w, drop_dc=False, fold=False)).item() == pytest.approx(1 / n, rel=1e-12)


def test_impulse_flat_spectrum_even_n_counts_nyquist_once():
    n = 12  # folded: a_f^2 = 2 for f = 1..5, 1 at f = 6 -> IPR = (5*4 + 1) / (5*2 + 1)^2
    w = torch.zeros(n, dtype=torch.float64)
    w[0] = 1.0
    assert ipr(fourier_amplitudes(w)).item() == pytest.approx(21 / 121, rel=1e-12)


def test_columns_are_independent_neurons():
    w = torch.stack([_wave(97, 2), _wave(97, 9) + _wave(97, 30)], dim=1)
    assert ipr(fourier_amplitudes(w)).tolist() == pytest.approx([1.0, 0.5], abs=1e-12)


def test_joint_ipr_of_two_operands():
    same = neuron_ipr([_wave(97, 7)[:, None], _wave(97, 7, phase=1.0)[:, None]])
    assert same["joint"].item() == pytest.approx(1.0) and same["frequency"].item() == 7
    different = neuron_ipr([_wave(97, 7)[:, None], _wave(97, 11)[:, None]])
    assert different["joint"].item() == pytest.approx(0.5)
    assert different["each"].squeeze(1).tolist() == pytest.approx([1.0, 1.0])
    a, b = torch.rand(48, 3), torch.rand(48, 3)
    torch.testing.assert_close(joint_amplitudes(a, b), (a**2 + b**2).sqrt())


def test_zero_vector_has_nan_ipr_and_dtype_is_kept():
    w = torch.zeros(11, 2)
    w[:, 1] = _wave(11, 2).float()
    out = ipr(fourier_amplitudes(w))
    assert (
        out.dtype == torch.float32
        and math.isnan(out[0].item())
        and out[1].item() == pytest.approx(1.0, abs=1e-6)
    )
