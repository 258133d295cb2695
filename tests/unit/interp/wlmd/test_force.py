"""The sampler's bias force ``-kT grad S`` pulled back through the CVs, the sphere and the wall
(`interp.wlmd.sampler`), on CVs simple enough to differentiate by hand.
"""

from __future__ import annotations

import pytest
import torch

from interp.wlmd.grid import GridSpec, Schedule
from interp.wlmd.sampler import Sampler, WLMDConfig

SPEC = GridSpec(x_range=(0.0, 4.0), y_range=(0.0, 2.0), n_x=4, n_y=2)
FROZEN = Schedule(kind="ramp", ln_f_max=0.0)


def _first_two(theta: torch.Tensor) -> torch.Tensor:
    return theta[:2]


def _squares(theta: torch.Tensor) -> torch.Tensor:
    return torch.stack([(theta**2).sum(), theta[0] * theta[1]])


def _sampler(cv, theta0, **settings) -> Sampler:
    config = WLMDConfig(grid=SPEC, schedule=FROZEN, sigma=(0.0, 0.0), **settings)
    return Sampler(cv, config, theta0.double()[None])


def _tilted(S: torch.Tensor) -> torch.Tensor:
    """S rising by 1 per x-bin and 3 between the two y-rows."""
    S[:] = torch.arange(4, dtype=torch.float64)[:, None] + torch.tensor([0.0, 3.0], dtype=torch.float64)
    return S


def test_the_force_is_minus_kt_times_the_slope_of_s_along_each_cv():
    theta = torch.tensor([1.7, 0.5, 9.0])
    sampler = _sampler(_first_two, theta, kT=2.0)
    _tilted(sampler.S[0])
    cv, force = sampler.force_at(theta.double())
    assert cv.tolist() == pytest.approx([1.7, 0.5])
    assert force.tolist() == pytest.approx([-2.0 * 1.0, -2.0 * 3.0, 0.0])


def test_the_force_is_pulled_back_through_the_cvs_by_the_chain_rule():
    theta = torch.tensor([0.9, 0.8, 0.3], dtype=torch.float64)  # x = |theta|^2 = 1.54, y = 0.72
    sampler = _sampler(_squares, theta)
    _tilted(sampler.S[0])
    _, force = sampler.force_at(theta)
    dS_dx, dS_dy = 1.0, 3.0
    by_hand = -(dS_dx * 2 * theta + dS_dy * torch.tensor([theta[1], theta[0], 0.0], dtype=torch.float64))
    torch.testing.assert_close(force, by_hand)


def test_outside_the_grid_there_are_no_cvs_and_no_force():
    sampler = _sampler(_first_two, torch.tensor([1.0, 1.0]))
    cv, force = sampler.force_at(torch.tensor([5.0, 1.0], dtype=torch.float64))
    assert cv is None and torch.equal(force, torch.zeros(2, dtype=torch.float64))


def test_on_a_flat_s_or_a_flat_edge_the_force_vanishes():
    sampler = _sampler(_first_two, torch.tensor([1.5, 0.5]))
    assert torch.equal(
        sampler.force_at(torch.tensor([1.2, 0.7], dtype=torch.float64))[1],
        torch.zeros(2, dtype=torch.float64),
    )
    _tilted(sampler.S[0])
    # Between the grid's edge and the outermost centre a flat-edged S is constant along x.
    force = sampler.force_at(torch.tensor([3.8, 1.5], dtype=torch.float64))[1]
    assert force[0].item() == 0.0


def test_on_the_sphere_the_start_velocity_and_drift_stay_tangent_and_on_the_radius():
    theta = torch.tensor([1.0, 1.0, 1.0])
    sampler = _sampler(lambda t: torch.stack([t[0].abs() + 1.0, t[1].abs()]), theta, radius=2.0)
    assert sampler.theta[0].norm().item() == pytest.approx(2.0)
    assert (sampler.v[0] @ sampler.theta[0]).item() == pytest.approx(0.0, abs=1e-12)
    v, new = sampler.drift(sampler.theta[0], sampler.v[0], torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert (v @ sampler.theta[0]).item() == pytest.approx(0.0, abs=1e-12)
    assert new.norm().item() == pytest.approx(2.0)


def test_a_drift_out_of_the_grid_is_undone_and_counted_as_a_wall():
    theta = torch.tensor([3.99, 1.0])
    sampler = _sampler(_first_two, theta, dt=1.0, gamma=1e-12)
    sampler.v[0] = torch.tensor([1.0, 0.0], dtype=torch.float64)  # straight at the x edge
    sampler.advance()
    assert sampler.walls == 1
    assert torch.equal(sampler.theta[0], theta.double())
    assert sampler.v[0, 0].item() == pytest.approx(-1.0, abs=1e-4)  # reversed (gamma ~ 0: little noise)
