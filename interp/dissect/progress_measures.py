"""Progress measures of modular addition (studies B and C), after Nanda et al. (2023).

A network that has learned ``x + y mod p`` with the Fourier-multiplication circuit represents
each operand by a few *key frequencies* ``w_k = 2 pi k / p``: the embeddings are sparse in the
Fourier basis of Z_p, the neurons compute products of ``cos(w_k x)``, ``sin(w_k y)``, ..., and
the logits are sums of ``cos(w_k (x + y - c))``. The measures here quantify that circuit over
the full p x p grid of inputs (ordered ``x * p + y``):

* `fourier_basis`: the orthonormal real Fourier basis of Z_p (constant, then ``cos k``,
  ``sin k`` for k = 1 .. (p-1)/2, and ``cos p/2`` for even p), rows over the p values;
* `frequency_power`: the squared norm of a matrix's Fourier coefficients per frequency
  (cos and sin added), the power spectrum of an embedding over its p rows;
* `key_frequencies`: the frequencies whose embedding power exceeds `ratio` times the mean
  power per frequency (at least the largest);
* `restricted_logits` / `excluded_logits`: for every output class c, the logits as a function
  of the p x p inputs projected onto (restricted), or with the projection removed onto
  (excluded), the directions ``cos(w_k (x + y))`` and ``sin(w_k (x + y))`` of the key
  frequencies; the restricted logits keep the constant (each class's mean logit) too. The
  restricted loss falls when the generalising circuit forms, the excluded loss rises when the
  model has come to rely on it (Nanda et al.'s "restricted loss" and "excluded loss");
* `neuron_frequency_fve`: each neuron's activation over the grid in the 2-D Fourier basis;
  the fraction of its variance (everything but the constant) that lies in the terms of one
  frequency k (``cos/sin(w_k x)``, ``cos/sin(w_k y)`` and their four products), the frequency
  with the largest fraction, and that fraction.

Reference: Nanda, Chan, Lieberum, Smith and Steinhardt, "Progress measures for grokking via
mechanistic interpretability" (ICLR 2023).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from interp.errors import ConfigError


def n_frequencies(p: int) -> int:
    """Number of nonzero frequencies of Z_p: ``p // 2``."""
    return p // 2


def fourier_basis(p: int) -> tuple[Float[Tensor, "p p"], list[str]]:
    """The orthonormal real Fourier basis of Z_p (float64), rows over the values 0 .. p-1.

    Returns:
        The basis [basis vector, value] and the name of each row (``const``, ``cos 1``, ``sin 1``, ...).
    """
    x = torch.arange(p, dtype=torch.float64)
    rows, names = [torch.ones(p, dtype=torch.float64)], ["const"]
    for k in range(1, n_frequencies(p) + 1):
        rows.append(torch.cos(2 * math.pi * k * x / p))
        names.append(f"cos {k}")
        if 2 * k != p:  # sin(pi x) vanishes on the integers: no sin at the Nyquist frequency
            rows.append(torch.sin(2 * math.pi * k * x / p))
            names.append(f"sin {k}")
    basis = torch.stack(rows)
    return basis / basis.norm(dim=1, keepdim=True), names


def _frequency_of_rows(p: int) -> Tensor:
    """The frequency of each basis row (0 for the constant)."""
    return torch.tensor([0 if n == "const" else int(n.split()[1]) for n in fourier_basis(p)[1]])


def frequency_power(weights: Float[Tensor, " p *rest"]) -> Float[Tensor, " freq"]:
    """Squared norm of the Fourier coefficients of `weights` (over its first axis), per frequency
    1 .. p // 2, summed over every other axis (an embedding's power spectrum).
    """
    p = weights.shape[0]
    coeffs = fourier_basis(p)[0] @ weights.double().reshape(p, -1)  # [basis, rest]
    power = coeffs.square().sum(1)
    freq = _frequency_of_rows(p)
    return torch.zeros(n_frequencies(p) + 1, dtype=power.dtype).index_add_(0, freq, power)[1:]


def key_frequencies(power: Float[Tensor, " freq"], ratio: float = 3.0) -> list[int]:
    """Frequencies (1-based) whose power exceeds `ratio` times the mean power; at least the largest."""
    if ratio <= 0:
        raise ConfigError(f"key-frequency ratio {ratio!r} must be positive", "e.g. 3")
    keys = (torch.nonzero(power > ratio * power.mean()).flatten() + 1).tolist()
    return keys or [int(power.argmax()) + 1]


def parse_frequencies(text: str, p: int) -> list[int] | None:
    """``"auto"`` -> None; ``"14,35"`` -> [14, 35] (each in 1 .. p // 2).

    Raises:
        ConfigError: On a value that is not a frequency of Z_p.
    """
    if text.strip() == "auto":
        return None
    try:
        keys = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ConfigError(
            f"frequencies={text!r} is not 'auto' or a list of integers", "e.g. auto or 14,35,41"
        ) from None
    bad = [k for k in keys if not 1 <= k <= n_frequencies(p)]
    if not keys or bad:
        raise ConfigError(
            f"frequencies={text!r}: {bad or 'none given'}", f"use 'auto' or integers in 1..{n_frequencies(p)}"
        )
    return keys


def sum_directions(p: int, keys: Sequence[int]) -> Float[Tensor, "pairs n_dirs"]:
    """Orthonormal ``cos(w_k (x + y))``, ``sin(w_k (x + y))`` over the grid (rows ``x * p + y``)."""
    s = (torch.arange(p)[:, None] + torch.arange(p)[None, :]).flatten().double()
    columns = []
    for k in keys:
        columns.append(torch.cos(2 * math.pi * k * s / p))
        if 2 * k != p:
            columns.append(torch.sin(2 * math.pi * k * s / p))
    directions = torch.stack(columns, 1)
    return directions / directions.norm(dim=0, keepdim=True)


def _key_component(logits: Float[Tensor, "pairs c"], p: int, keys: Sequence[int]) -> Tensor:
    """The part of each output column of `logits` in the span of the key `sum_directions`."""
    directions = sum_directions(p, keys)
    return (directions @ (directions.T @ logits.double())).to(logits.dtype)


def restricted_logits(
    logits: Float[Tensor, "pairs c"], p: int, keys: Sequence[int]
) -> Float[Tensor, "pairs c"]:
    """The logits projected onto the constant and the key frequencies of ``x + y`` (per class)."""
    _check_grid(logits, p)
    return logits.mean(0, keepdim=True) + _key_component(logits - logits.mean(0, keepdim=True), p, keys)


def excluded_logits(
    logits: Float[Tensor, "pairs c"], p: int, keys: Sequence[int]
) -> Float[Tensor, "pairs c"]:
    """The logits with their components along the key frequencies of ``x + y`` removed (per class)."""
    _check_grid(logits, p)
    return logits - _key_component(logits, p, keys)


def _check_grid(values: Tensor, p: int) -> None:
    if values.shape[0] != p * p:
        raise ValueError(f"expected one row per (x, y) pair of Z_{p} ({p * p}), got {values.shape[0]}")


def neuron_frequency_fve(
    acts: Float[Tensor, "pairs neurons"], p: int
) -> tuple[Float[Tensor, "freq neurons"], Tensor, Tensor]:
    """Fraction of each neuron's variance explained by each frequency (see the module docstring).

    Args:
        acts: Each neuron's activation at every input of the grid (rows ``x * p + y``).
        p: The modulus.

    Returns:
        ``fve`` [freq, neurons] (frequencies 1 .. p // 2), each neuron's best frequency (1-based,
        int64 [neurons]) and its fraction [neurons]. A constant (dead) neuron has no variance to
        explain: NaN fractions and frequency 0.
    """
    _check_grid(acts, p)
    basis = fourier_basis(p)[0]
    grid = acts.double().reshape(p, p, -1)
    coeffs = torch.einsum("ix,jy,xyn->ijn", basis, basis, grid).square()  # [basis x, basis y, neuron]
    coeffs[0, 0] = 0.0  # the constant is not variance
    total = coeffs.sum((0, 1))
    freq = _frequency_of_rows(p)
    fve = []
    for k in range(1, n_frequencies(p) + 1):
        rows = (freq == 0) | (freq == k)  # const, cos k, sin k: linear terms and products of frequency k
        fve.append(coeffs[rows][:, rows].sum((0, 1)) / total)
    fve_t = torch.stack(fve).float()
    best = fve_t.nan_to_num(-1.0).argmax(0)
    best_fve = fve_t.gather(0, best[None]).squeeze(0)
    return fve_t, torch.where(best_fve.isnan(), 0, best + 1), best_fve
