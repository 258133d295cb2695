"""`interp.dissect.learning_coefficient.llc` against the exact finite-temperature LLC.

Oracle: the tempered, localized posterior the sampler targets,
``p(w) ∝ exp(-n_beta * L(w) - gamma / 2 * ||w - w*||^2)``, has a closed-form
``E[n_beta * (L(w) - L(w*))]`` in two cases, computed here independently of the sampler:

* linear regression, ``L(w) = 1/(2n) ||Xw - y||^2`` at the least-squares ``w*``: the posterior is
  Gaussian with precision ``a_i = n_beta * h_i + gamma`` along the Hessian's eigenvectors, so the
  value is ``1/2 sum_i n_beta h_i / a_i`` (-> d/2). SGLD's Euler step samples a Gaussian whose
  variance along i is ``1 / (a_i (1 - eps a_i / 4))`` (the fixed point of
  ``v = (1 - eps a/2)^2 v + eps``), so the chains' *exact* target is
  ``1/2 sum_i n_beta h_i / (a_i (1 - eps a_i / 4))``; the difference between the two is the step
  size's bias, stated in each test. Restricting to k coordinates gives the sum over those k.
* the singular model ``f = a * b * x`` at ``a * b = 0`` (y = 0, mean x^2 = 1), whose value is a
  one-dimensional quadrature over a (b is Gaussian given a), and a regular two-parameter model
  at the same ``n_beta, gamma``: ~0.34 against ~0.99 at n_beta = 100, ~0.38 against ~1.0 at
  n_beta = 1,000 (the slow suite: ten times more steps).

Tolerances: the step-size bias (exact for the Gaussian, a one-dimensional estimate for the
singular model) plus four standard errors over chains (chains are independent: their spread is
the honest error of the mean).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate
from torch import nn

from interp.dissect.learning_coefficient import llc

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _mse(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    x, y = batch
    return 0.5 * (model(x).squeeze(-1) - y).square().mean()


def _regression(
    d: int = 4, n: int = 512, seed: int = 0
) -> tuple[nn.Module, tuple[torch.Tensor, ...], torch.Tensor]:
    """A linear model at the least-squares solution, its data, and the Hessian ``X^T X / n``."""
    gen = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-1, 0.3, d, dtype=torch.float64)  # eigenvalues spread over ~2 decades
    x = torch.randn(n, d, generator=gen, dtype=torch.float64) * scales
    y = x @ torch.randn(d, generator=gen, dtype=torch.float64) + 0.1 * torch.randn(
        n, generator=gen, dtype=torch.float64
    )
    model = nn.Linear(d, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.linalg.lstsq(x, y[:, None]).solution.T)
    return model, (x, y), x.T @ x / n


def _gaussian_value(h: torch.Tensor, n_beta: float, gamma: float, eps: float = 0.0) -> float:
    """``1/2 sum n_beta h / (a (1 - eps a / 4))``, a = n_beta h + gamma (eps = 0: the exact value)."""
    a = n_beta * h + gamma
    return float(0.5 * (n_beta * h / (a * (1 - eps * a / 4))).sum())


N_BETA, GAMMA, EPS = 100.0, 10.0, 1e-3
SETTINGS = dict(step_size=EPS, n_beta=N_BETA, localization=GAMMA, chains=12, draws=600, burn_in=300)


def test_linear_regression_matches_the_exact_finite_temperature_value():
    model, data, hessian = _regression()
    h = torch.linalg.eigvalsh(hessian)
    exact, target = _gaussian_value(h, N_BETA, GAMMA), _gaussian_value(h, N_BETA, GAMMA, EPS)
    result = llc(model, data, _mse, **SETTINGS)
    # The chains target `target`; it differs from the exact value by the step size's bias.
    bias = target - exact
    assert abs(result.estimate - target) < 4 * result.se, (result.estimate, target, result.se)
    assert abs(result.estimate - exact) < abs(bias) + 4 * result.se
    assert exact < h.numel() / 2 and result.health.flags.count("diverged") == 0


def test_restricting_to_k_coordinates_sums_over_those_k():
    # Diagonal Hessian (orthogonal design), so a coordinate restriction is an eigen-restriction.
    d, n = 4, 512
    x = torch.linalg.qr(torch.randn(n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64))[0]
    x = x * math.sqrt(n) * torch.tensor([0.1, 0.3, 1.0, 2.0], dtype=torch.float64)
    y = x @ torch.ones(d, dtype=torch.float64)
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Linear(2, 1, bias=False)).double()

    def loss(m: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        xb, yb = batch
        out = m[0](xb[:, :2]) + m[1](xb[:, 2:])
        return 0.5 * (out.squeeze(-1) - yb).square().mean()

    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[1].weight.fill_(1.0)
    h = torch.diagonal(x.T @ x / n)
    for restrict, k in (("0.weight", slice(0, 2)), ("1.weight", slice(2, 4))):
        result = llc(model, (x, y), loss, restrict=restrict, **SETTINGS)
        target, whole = _gaussian_value(h[k], N_BETA, GAMMA, EPS), _gaussian_value(h, N_BETA, GAMMA, EPS)
        assert result.sampled == 2
        assert abs(result.estimate - target) < 4 * result.se, (restrict, result.estimate, target, result.se)
        assert abs(result.estimate - whole) > 4 * result.se  # not the sum over all four


class _Product(nn.Module):
    """``f(x) = a * b * x``: singular at ``a * b = 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * self.b * x


class _Sum(nn.Module):
    """``f(x) = a * x1 + b * x2``: regular, two parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a * x[..., 0] + self.b * x[..., 1]


def _singular_value(kappa: float, eps: float = 0.0) -> float:
    """Exact ``E[n_beta L]`` of ``f = a b x`` (mean x^2 = 1, y = 0, gamma = 1, kappa = n_beta):
    given a, b is Gaussian with precision ``c = kappa a^2 + 1`` (with eps: SGLD's variance
    ``1 / (c (1 - eps c / 4))``, the step-size bias's estimate), so ``E[n_beta L | a] =
    kappa a^2 var / 2`` and a's density is ``exp(-a^2 / 2) sqrt(var)``.
    """

    def var(a: float) -> float:
        c = kappa * a * a + 1
        return 1 / (c * (1 - eps * c / 4))

    def weight(a: float) -> float:
        return math.exp(-a * a / 2) * math.sqrt(var(a))

    # With eps, up to where a step halves b's restoring force (eps c = 2): the SGLD variance
    # diverges at eps c = 4, far in a's Gaussian tail (a > 3 at kappa = 100), which it weights ~1e-3.
    top = 8.0 if eps == 0 else math.sqrt((2 / eps - 1) / kappa)
    num = integrate.quad(lambda a: weight(a) * kappa * a * a * var(a) / 2, 0, top, limit=200)[0]
    return num / integrate.quad(weight, 0, top, limit=200)[0]


@pytest.mark.parametrize(
    "kappa, eps, draws, quadrature",
    [
        pytest.param(100.0, 2e-3, 2000, (0.33, 0.35), id="n_beta=1e2"),
        # Ten times colder: ten times smaller steps, ten times more of them (~60 s on 2 cores).
        pytest.param(1000.0, 2e-4, 20000, (0.37, 0.39), id="n_beta=1e3", marks=pytest.mark.slow),
    ],
)
def test_singular_model_is_recovered_and_told_apart_from_a_regular_one(kappa, eps, draws, quadrature):
    n = 256
    x = torch.randn(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    x = x / x.square().mean().sqrt()  # mean x^2 = 1 exactly: n_beta * s = kappa
    settings = dict(step_size=eps, n_beta=kappa, localization=1.0, chains=24, draws=draws, burn_in=draws // 2)
    singular = llc(_Product(), (x, torch.zeros(n, dtype=torch.float64)), _mse, **settings)
    exact, shifted = _singular_value(kappa), _singular_value(kappa, eps)
    assert quadrature[0] < exact < quadrature[1]  # the quadrature itself (-> 1/2 only logarithmically)
    bias = abs(shifted - exact)
    assert abs(singular.estimate - exact) < 2 * bias + 4 * singular.se, (
        singular.estimate,
        exact,
        bias,
        singular.se,
    )
    x2 = torch.stack([x, torch.randn(n, generator=torch.Generator().manual_seed(3), dtype=torch.float64)], -1)
    regular = llc(_Sum(), (x2, torch.zeros(n, dtype=torch.float64)), _mse, **settings)
    h = torch.linalg.eigvalsh(x2.T @ x2 / n)
    target = _gaussian_value(h, kappa, 1.0, eps)
    assert abs(regular.estimate - target) < 4 * regular.se, (regular.estimate, target, regular.se)
    gap = regular.estimate - singular.estimate
    assert gap > 4 * math.hypot(regular.se, singular.se) and gap > 0.5


def test_the_same_seed_gives_the_same_estimate_bit_for_bit():
    model, data, _ = _regression(d=3, n=64)
    settings = dict(SETTINGS, draws=50, burn_in=10, batch_size=16, chains=3)
    first, second = llc(model, data, _mse, **settings), llc(model, data, _mse, **settings)
    assert first.estimate == second.estimate and torch.equal(first.losses, second.losses)
    other = llc(model, data, _mse, **dict(settings, seed=1))
    assert other.estimate != first.estimate
    assert np.isfinite(first.losses.numpy()).all()
