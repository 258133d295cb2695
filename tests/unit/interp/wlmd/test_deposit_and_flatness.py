"""Deposits into S and the flatness of a histogram (`interp.wlmd.grid`), and the ln f schedule."""

from __future__ import annotations

import math

import pytest
import torch

from interp.wlmd.grid import GridSpec, OutOfGrid, Schedule, deposit, flatness

SPEC = GridSpec(x_range=(0.0, 10.0), y_range=(0.0, 5.0), n_x=10, n_y=5)


def _zeros() -> torch.Tensor:
    return torch.zeros(SPEC.n_x, SPEC.n_y, dtype=torch.float64)


def test_a_deposit_without_a_kernel_adds_to_its_bin_only():
    S = _zeros()
    deposit(S, SPEC, 3, 2, 0.5, (0.0, 0.0))
    expected = _zeros()
    expected[3, 2] = 0.5
    assert torch.equal(S, expected)


def test_a_gaussian_deposit_adds_the_amount_in_all_peaked_at_its_bin_and_symmetric():
    S = _zeros()
    deposit(S, SPEC, 5, 2, 2.0, (1.0, 0.7))
    assert S.sum().item() == pytest.approx(2.0)
    assert S.argmax().item() == 5 * SPEC.n_y + 2
    # Away from the x edges the kernel is the Gaussian itself: exp(-1/2) of the peak one bin off.
    assert (S[4, 2] / S[5, 2]).item() == pytest.approx(math.exp(-0.5))
    assert S[4, 2].item() == pytest.approx(S[6, 2].item())
    assert S[5, 1].item() == pytest.approx(S[5, 3].item())


def test_a_deposit_at_the_edge_is_mirrored_back_into_the_grid_never_wrapped():
    S = _zeros()
    deposit(S, SPEC, 0, 0, 1.0, (1.0, 1.0))
    assert S.sum().item() == pytest.approx(1.0)  # nothing lost past the edge
    assert S[-1].abs().max().item() == 0.0 and S[:, -1].abs().max().item() == 0.0  # nothing wrapped
    # The weight of bin -1 lands on bin 0: bin 0 and bin 1 then hold exp(0) + exp(-1/2) and
    # exp(-1/2) + exp(-2) (bins -2 and 1 mirror to 1), in the Gaussian's units.
    ratio = (math.exp(-0.5) + math.exp(-2.0)) / (1.0 + math.exp(-0.5))
    assert (S[1, 0] / S[0, 0]).item() == pytest.approx(ratio)


def test_one_deposit_at_every_bin_raises_s_evenly_edges_included():
    # The mirror makes a flat histogram add the same to every bin: S stays flat.
    S = _zeros()
    for i in range(SPEC.n_x):
        for j in range(SPEC.n_y):
            deposit(S, SPEC, i, j, 1.0, (1.5, 1.0))
    torch.testing.assert_close(S, torch.ones_like(S), rtol=0, atol=1e-12)


def test_a_deposit_outside_the_grid_is_refused():
    with pytest.raises(OutOfGrid):
        deposit(_zeros(), SPEC, SPEC.n_x, 0, 1.0, (1.0, 1.0))


def test_flatness_over_visited_bins_is_min_over_mean_of_the_nonzero_ones():
    H = torch.zeros(4, 3)
    assert flatness(H) == 0.0  # nothing visited yet
    H[0, 0], H[1, 2], H[3, 1] = 2.0, 4.0, 6.0
    assert flatness(H) == pytest.approx(2.0 / 4.0)
    H[:] = 5.0
    assert flatness(H) == 1.0


def test_flatness_over_x_counts_every_x_bin_summed_over_y():
    H = torch.zeros(3, 2)
    H[0, 0], H[1, 1] = 3.0, 3.0
    assert flatness(H, "x") == 0.0  # the third x-bin has no visit yet
    H[2, 0], H[2, 1] = 1.0, 2.0
    assert flatness(H, "x") == 1.0
    H[0, 1] = 3.0  # x sums 6, 3, 3
    assert flatness(H, "x") == pytest.approx(3.0 / 4.0)
    with pytest.raises(Exception, match="over"):
        flatness(H, "y")


def test_the_ramp_rises_holds_then_decays_as_one_over_t():
    s = Schedule(kind="ramp", ln_f_max=0.1, rise=10, plateau=5, decay_tau=20)
    assert s.ramp(0) == pytest.approx(0.01) and s.ramp(9) == pytest.approx(0.1)
    assert s.ramp(10) == s.ramp(14) == 0.1
    assert s.ramp(15) == pytest.approx(0.1) and s.ramp(35) == pytest.approx(0.05)
