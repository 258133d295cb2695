"""Inverse participation ratio (IPR) of weight vectors over the Fourier basis of Z_n.

A neuron of the quadratic MLP (`models.QuadraticMLP`) reads each operand through a weight vector over the `p`
token values (`W_E_left[:p, k]` for `m`, `W_E_right[:p, k]` for `n`). A generalising neuron's
weights are close to a single sinusoid `cos(2 pi f x / p + phi)`; a memorising neuron's are
spread over many frequencies. The IPR measures that concentration:

    IPR = sum_f (a_f / ||a||_2)^4,

where `a_f` are the Fourier amplitudes of the weight vector. It is 1 when all power sits in one
frequency and `1 / F` for a flat spectrum over `F` frequencies.

Choices:

* **DC dropped.** The constant component (f = 0) is an offset, not a periodic feature; with
  it, a neuron's IPR would depend on its mean weight. `drop_dc=False` keeps it.
* **f and n - f folded.** For real weights `|F_f| = |F_{n-f}|`: the two are one real sinusoid.
  The folded amplitude is `a_f = sqrt(|F_f|^2 + |F_{n-f}|^2)` for `0 < f < n/2` (and `|F_f|`
  for `f = n/2` when `n` is even), so a pure sinusoid has exactly one nonzero `a_f`. For odd
  `n` there are `(n - 1) / 2` folded frequencies (48 for p = 97).
* **Two inputs combined by power.** `joint_amplitudes` adds the powers of several weight
  vectors frequency by frequency (`a_f = sqrt(sum_i a_{i,f}^2)`), so a neuron that reads both
  operands at the same frequency has joint IPR 1 (the signature of the generalising circuit,
  which computes `cos(w(m + n))` from `cos(wm)` and `cos(wn)`); one that uses different
  frequencies for `m` and `n` has joint IPR 1/2. The left and right IPRs are also reported.
* A zero weight vector has no spectrum: its IPR is NaN.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor


def fourier_amplitudes(
    weights: Float[Tensor, " n *rest"], *, drop_dc: bool = True, fold: bool = True
) -> Float[Tensor, " freq *rest"]:
    """Fourier amplitudes of real weight vectors over Z_n, along dimension 0.

    Args:
        weights: Real values over the `n` group elements (dimension 0), e.g. [p, d_hidden]
            for every neuron at once.
        drop_dc: Drop the constant component (f = 0).
        fold: Merge f and n - f by power (see the module docstring); if False, return the
            `n` (or `n - 1` without DC) unfolded magnitudes `|F_f|`.

    Returns:
        Amplitudes [freq, *rest]: frequencies 1..floor(n/2) when folded (0..floor(n/2) with DC).
    """
    n = weights.shape[0]
    spectrum = torch.fft.fft(weights.double(), dim=0).abs()
    if fold:
        half = n // 2
        power = spectrum[: half + 1].square()
        mirror = torch.zeros_like(power)
        upper = (n - 1) // 2  # frequencies f with a distinct partner n - f (excludes Nyquist)
        mirror[1 : upper + 1] = spectrum[n - upper :].flip(0).square()
        spectrum = (power + mirror).sqrt()
    start = 1 if drop_dc else 0
    return spectrum[start:].to(weights.dtype)


def joint_amplitudes(*amplitudes: Float[Tensor, " freq *rest"]) -> Float[Tensor, " freq *rest"]:
    """Combine the spectra of several weight vectors by adding their power per frequency."""
    return torch.stack(amplitudes).square().sum(0).sqrt()


def ipr(amplitudes: Float[Tensor, " freq *rest"]) -> Float[Tensor, "*rest"]:
    """`sum_f (a_f / ||a||_2)^4` along dimension 0; NaN where all amplitudes are zero."""
    a = amplitudes.double()
    norm2 = a.square().sum(0)
    value = a.pow(4).sum(0) / norm2.square()
    return torch.where(norm2 > 0, value, torch.nan).to(amplitudes.dtype)


def dominant_frequency(amplitudes: Float[Tensor, " freq *rest"], *, drop_dc: bool = True) -> Tensor:
    """The frequency with the largest amplitude (in units of 1/n; folded spectra)."""
    return amplitudes.argmax(0) + (1 if drop_dc else 0)


def neuron_ipr(
    inputs: list[Float[Tensor, "n d_hidden"]], *, drop_dc: bool = True, fold: bool = True
) -> dict[str, Tensor]:
    """Per-neuron IPRs of a layer read through one or more input weight matrices.

    Args:
        inputs: Weight matrices over the `n` input values, one per operand, each [n, d_hidden]
            (the quadratic MLP: `[W_E_left[:p], W_E_right[:p]]`).
        drop_dc: See `fourier_amplitudes`.
        fold: See `fourier_amplitudes`.

    Returns:
        ``{"joint": [d_hidden], "each": [len(inputs), d_hidden], "frequency": [d_hidden]}``:
        the joint IPR (power summed over the inputs), each input's own IPR, and the dominant
        frequency of the joint spectrum.
    """
    spectra = [fourier_amplitudes(w, drop_dc=drop_dc, fold=fold) for w in inputs]
    joint = joint_amplitudes(*spectra)
    return {
        "joint": ipr(joint),
        "each": torch.stack([ipr(a) for a in spectra]),
        "frequency": dominant_frequency(joint, drop_dc=drop_dc),
    }
