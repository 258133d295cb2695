"""The entropy grid: bins, bounds and the bilinear S between bin centres (`interp.wlmd.grid`)."""

from __future__ import annotations

import math

import pytest
import torch

from interp.wlmd.grid import GridSpec, OutOfGrid, at, interpolate

SPEC = GridSpec(x_range=(0.0, 4.0), y_range=(-1.0, 1.0), n_x=4, n_y=2)


def test_a_point_falls_in_the_bin_whose_half_open_interval_holds_it():
    assert SPEC.widths == (1.0, 1.0)
    assert SPEC.index(0.0, -1.0) == (0, 0)
    assert SPEC.index(0.999, -0.001) == (0, 0)
    assert SPEC.index(1.0, 0.0) == (1, 1)
    assert SPEC.index(3.999999, 0.999999) == (3, 1)
    assert [c.tolist() for c in SPEC.centres()] == [[0.5, 1.5, 2.5, 3.5], [-0.5, 0.5]]


@pytest.mark.parametrize("point", [(4.0, 0.0), (-1e-9, 0.0), (2.0, 1.0), (math.nan, 0.0), (2.0, math.nan)])
def test_a_point_outside_the_grid_or_nan_is_refused_never_wrapped(point):
    assert not SPEC.contains(*point)
    with pytest.raises(OutOfGrid):
        SPEC.index(*point)


def test_a_bin_index_out_of_range_is_refused_where_plain_indexing_would_wrap():
    S = torch.arange(8, dtype=torch.float64).reshape(4, 2)
    assert at(S, SPEC, 3, 1) == 7
    for i, j in ((-1, 0), (4, 0), (0, 2), (0, -1)):
        with pytest.raises(OutOfGrid):
            at(S, SPEC, i, j)


@pytest.mark.parametrize("bad", [dict(x_range=(1.0, 1.0)), dict(n_x=0), dict(n_y=True), dict(edges="wrap")])
def test_a_malformed_grid_is_refused(bad):
    with pytest.raises(ValueError):
        GridSpec(**{"x_range": (0.0, 1.0), "y_range": (0.0, 1.0), "n_x": 2, "n_y": 2, **bad})


def _S() -> torch.Tensor:
    return torch.tensor([[0.0, 10.0], [1.0, 11.0], [3.0, 13.0], [6.0, 16.0]], dtype=torch.float64)


def test_s_at_a_bin_centre_is_the_bins_value_and_bilinear_in_between():
    S = _S()
    for i, x in enumerate((0.5, 1.5, 2.5, 3.5)):
        for j, y in enumerate((-0.5, 0.5)):
            assert interpolate(S, SPEC, torch.tensor([x, y])).item() == pytest.approx(S[i, j].item())
    # A quarter of the way from centre (1, 0) to (2, 1) on both axes: the bilinear weights by hand.
    value = interpolate(S, SPEC, torch.tensor([1.75, -0.25])).item()
    by_hand = 0.75 * 0.75 * 1.0 + 0.25 * 0.75 * 3.0 + 0.75 * 0.25 * 11.0 + 0.25 * 0.25 * 13.0
    assert value == pytest.approx(by_hand)


def test_flat_edges_hold_s_constant_beyond_the_outermost_centre_and_linear_edges_carry_the_slope():
    S = _S()
    flat, linear = SPEC, GridSpec((0.0, 4.0), (-1.0, 1.0), 4, 2, edges="linear")
    below, above = torch.tensor([0.1, -0.5]), torch.tensor([3.9, -0.5])
    assert interpolate(S, flat, below).item() == pytest.approx(0.0)
    assert interpolate(S, flat, above).item() == pytest.approx(6.0)
    assert interpolate(S, linear, below).item() == pytest.approx(0.0 - 0.4 * 1.0)  # slope 1 per bin
    assert interpolate(S, linear, above).item() == pytest.approx(6.0 + 0.4 * 3.0)  # slope 3 per bin


def test_the_gradient_of_s_in_the_cvs_is_the_slope_between_neighbouring_centres():
    S, cv = _S(), torch.tensor([2.2, 0.5], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(interpolate(S, SPEC, cv), cv)
    # Between the x centres 1.5 and 2.5 on the top row: (13 - 11) / 1; along y S rises by 10
    # between the rows' centres, 0.2 of the way from the x=1.5 to the x=2.5 column: 10.
    assert grad.tolist() == pytest.approx([2.0, 10.0])


def test_a_one_bin_axis_is_a_dummy_cv():
    spec = GridSpec((0.0, 2.0), (0.0, 1.0), 2, 1)
    S = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    assert interpolate(S, spec, torch.tensor([1.0, 0.9])).item() == pytest.approx(2.0)
    assert interpolate(S, spec, torch.tensor([1.0, 0.1])).item() == pytest.approx(2.0)
