"""The state of Wang-Landau molecular dynamics: the entropy grid and the ln f schedule.

`EntropyGrid` bins two collective variables ``(x, y)`` on a regular grid and holds the running
entropy estimate ``S`` (log density of states) and the visit histogram ``H``, one copy per
walker (``[n_walkers, n_x, n_y]``). A second CV can be a dummy (``n_y = 1``): a 1-D
Wang-Landau on the same code.

Bounds: an index is never wrapped. `index` raises `OutOfGrid` for a point outside
``[x_lo, x_hi) x [y_lo, y_hi)``; `check` / `at` raise `OutOfGrid` for a negative or too-large
bin. The sampler (`interp.wlmd.sampler`) treats out-of-grid states as a wall.

Kernel: after each step, ``ln f`` times a separable Gaussian (``sigma`` in bins per axis,
radius ``ceil(3 sigma)``, weights summing to 1) is added to ``S`` around the current bin; the
part of the window beyond an edge is mirrored back into the grid (bin -1 -> 0, n -> n - 1),
so a flat histogram raises every bin equally (clipping would bias the edge bins low, and
wrapping would put mass at the far edge). ``sigma = 0`` on an axis is a single bin (classic
Wang-Landau).

Interpolation: ``S(x, y)`` is bilinear between bin centres, so ``grad_theta S(x(theta), y(theta))``
exists almost everywhere. Between an outermost centre and the grid's edge (half a bin) it
continues as `GridSpec.edges` says:

* ``"flat"`` (the default, and what every walk before the field ran): S is constant there, so
  the bias exerts no force in that half-bin. A walker that an entropic drift presses against a
  wall sits in it while the deposits raise S around it to no effect: nothing pushes it back.
* ``"linear"``: the slope between the two outermost centres carries on to the edge, so the
  deposits at an edge bin push a walker there back into the grid, as a Monte-Carlo move between
  bins would be weighted by the difference of their S.

Along an axis of one bin S is constant either way.

Schedules of ``ln f``: ``"ramp"`` (linear rise to ``ln_f_max`` over ``rise`` steps, a plateau of
``plateau`` steps, then ``ln_f_max * tau / (tau + t - t_1)``, a 1/t decay), or ``"flat"`` (the
classic: start at ``ln_f0``, halve whenever the summed histogram is flat, reset it, stop below
``ln_f_min``). Flatness is min / mean over the bins `Schedule.flat_over` names:

* ``"visited"`` (the default): the non-zero bins, because in 2-D many bins of the grid are not
  reachable at all. A walker held in one bin is "flat" by this count, so the classic schedule
  halves ln f while it goes nowhere.
* ``"x"``: every bin along x of the histogram summed over y (0 until each has a visit), for a
  walk that must cover a range of the first CV (a window in ln train loss, say) whatever
  values of the second it takes there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from interp.config import check_choice, param

EDGES = ("flat", "linear")
"""How S continues beyond the outermost bin centres (`GridSpec.edges`; the module docstring)."""

FLAT_OVER = ("visited", "x")
"""Which bins a flatness counts (`flatness`, `Schedule.flat_over`; the module docstring)."""


class OutOfGrid(ValueError):
    """A collective-variable point or bin index outside the entropy grid."""


@dataclass(frozen=True)
class GridSpec:
    """A regular grid over two collective variables.

    Attributes:
        x_range: ``(x_lo, x_hi)`` of the first CV.
        y_range: ``(y_lo, y_hi)`` of the second CV.
        n_x: Number of bins along x.
        n_y: Number of bins along y (1: a dummy second CV, i.e. 1-D Wang-Landau).
        edges: How S continues between an outermost bin centre and the grid's edge: ``"flat"``
            (constant, no force there) or ``"linear"`` (the outermost slope carried on).
    """

    x_range: tuple[float, float]
    y_range: tuple[float, float]
    n_x: int
    n_y: int
    edges: str = param(
        "flat",
        "How S continues beyond the outermost bin centres: flat (no force there) or linear "
        "(the outermost slope carried on to the edge).",
        added=True,
    )

    def __post_init__(self) -> None:
        check_choice("GridSpec", "edges", self.edges, EDGES)
        for name, (lo, hi), n in (("x", self.x_range, self.n_x), ("y", self.y_range, self.n_y)):
            if not hi > lo:
                raise ValueError(f"{name}_range={(lo, hi)!r} must have hi > lo")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"n_{name}={n!r} must be a positive integer")

    @property
    def widths(self) -> tuple[float, float]:
        """Bin widths along x and y."""
        return (
            (self.x_range[1] - self.x_range[0]) / self.n_x,
            (self.y_range[1] - self.y_range[0]) / self.n_y,
        )

    def contains(self, x: float, y: float) -> bool:
        """Whether ``(x, y)`` lies in ``[x_lo, x_hi) x [y_lo, y_hi)`` (NaN never does)."""
        return self.x_range[0] <= x < self.x_range[1] and self.y_range[0] <= y < self.y_range[1]

    def index(self, x: float, y: float) -> tuple[int, int]:
        """The bin ``(i, j)`` of a point; raises `OutOfGrid` outside the grid (never wraps)."""
        if not self.contains(x, y):
            raise OutOfGrid(f"point ({x:.6g}, {y:.6g}) is outside the grid {self.x_range} x {self.y_range}")
        dx, dy = self.widths
        i = min(int((x - self.x_range[0]) / dx), self.n_x - 1)  # float rounding at the top edge
        j = min(int((y - self.y_range[0]) / dy), self.n_y - 1)
        return i, j

    def check(self, i: int, j: int) -> None:
        """Raise `OutOfGrid` unless ``0 <= i < n_x`` and ``0 <= j < n_y`` (negative never wraps)."""
        if not (0 <= i < self.n_x and 0 <= j < self.n_y):
            raise OutOfGrid(f"bin ({i}, {j}) is outside the grid of {self.n_x} x {self.n_y} bins")

    def centres(self) -> tuple[Tensor, Tensor]:
        """Bin centres along x and y (float64)."""
        dx, dy = self.widths
        return (
            self.x_range[0] + dx * (torch.arange(self.n_x, dtype=torch.float64) + 0.5),
            self.y_range[0] + dy * (torch.arange(self.n_y, dtype=torch.float64) + 0.5),
        )


def at(S: Tensor, spec: GridSpec, i: int, j: int) -> Tensor:
    """``S[..., i, j]`` after a bounds check (a plain ``S[-1]`` would silently wrap)."""
    spec.check(i, j)
    return S[..., i, j]


def _axis(u: Tensor, n: int, edges: str) -> tuple[int, int, Tensor]:
    """Lower / upper centre index and the fraction between them, for continuous centre index u
    (in [-0.5, n - 0.5] inside the grid; below 0 or above 1 in an outer half-bin with linear edges).
    """
    if n == 1:
        return 0, 0, torch.zeros((), dtype=torch.float64)
    i0 = min(max(math.floor(float(u.detach())), 0), n - 2)
    return i0, i0 + 1, (u - i0) if edges == "linear" else (u - i0).clamp(0.0, 1.0)


def interpolate(S: Tensor, spec: GridSpec, cv: Tensor) -> Tensor:
    """Bilinear ``S(x, y)`` between bin centres, continued to the edges as `spec.edges` says,
    differentiable in `cv` ([2]); S is [n_x, n_y].
    """
    cv = cv.double()
    dx, dy = spec.widths
    i0, i1, tx = _axis((cv[0] - spec.x_range[0]) / dx - 0.5, spec.n_x, spec.edges)
    j0, j1, ty = _axis((cv[1] - spec.y_range[0]) / dy - 0.5, spec.n_y, spec.edges)
    return (
        (1 - tx) * (1 - ty) * S[i0, j0]
        + tx * (1 - ty) * S[i1, j0]
        + (1 - tx) * ty * S[i0, j1]
        + tx * ty * S[i1, j1]
    )


def _kernel_1d(centre: int, sigma: float, n: int) -> Tensor:
    """Dense Gaussian weights over ``[0, n)`` around `centre`, summing to 1, mirrored at the edges."""
    weights = torch.zeros(n, dtype=torch.float64)
    if sigma <= 0:
        weights[centre] = 1.0
        return weights
    radius = math.ceil(3 * sigma)
    offsets = torch.arange(-radius, radius + 1)
    kernel = torch.exp(-0.5 * (offsets.double() / sigma) ** 2)
    index = centre + offsets
    # Mirror at the edges (bin -1 -> 0, n -> n-1), never wrap: a flat histogram then adds the
    # same amount to every bin, edge bins included. Clamp for kernels wider than the grid.
    index = torch.where(index < 0, -index - 1, index)
    index = torch.where(index >= n, 2 * n - 1 - index, index).clamp(0, n - 1)
    return weights.index_add_(0, index, kernel / kernel.sum())


def deposit(S: Tensor, spec: GridSpec, i: int, j: int, amount: float, sigma: tuple[float, float]) -> None:
    """Add ``amount`` times the Gaussian kernel around bin ``(i, j)`` to ``S`` ([n_x, n_y]) in place."""
    spec.check(i, j)
    S += amount * torch.outer(_kernel_1d(i, sigma[0], spec.n_x), _kernel_1d(j, sigma[1], spec.n_y))


def flatness(H: Tensor, over: str = "visited") -> float:
    """Min / mean of a histogram ``H`` ([n_x, n_y]) over the bins `over` names (`FLAT_OVER`).

    ``"visited"``: the non-zero bins (0 if nothing was visited). ``"x"``: the n_x bins of ``H``
    summed over y, visited or not (0 while any has no visit).
    """
    check_choice("flatness", "over", over, FLAT_OVER)
    counted = H[H > 0] if over == "visited" else H.sum(-1)
    return float(counted.min() / counted.mean()) if len(counted) and counted.max() > 0 else 0.0


@dataclass(frozen=True)
class Schedule:
    """The ``ln f`` schedule (see the module docstring).

    Attributes:
        kind: ``"ramp"`` (rise, plateau, 1/t decay) or ``"flat"`` (halve when flat).
        ln_f_max: Plateau value of the ramp.
        rise: Steps of the linear rise (0: start at the plateau).
        plateau: Steps of the plateau.
        decay_tau: Time constant of the 1/t decay, in steps.
        ln_f0: Initial value of the flat-histogram schedule.
        flatness: Flatness (min / mean over the bins of `flat_over`) that triggers a halving.
        check_every: Steps between flatness checks.
        ln_f_min: The flat-histogram schedule stops updating below this.
        flat_over: Which bins the flatness counts: ``"visited"`` or ``"x"`` (`flatness`): the
            halving test of ``"flat"``, and with either kind the flatness a walk records.
    """

    kind: str = "ramp"
    ln_f_max: float = 0.01
    rise: int = 1000
    plateau: int = 20000
    decay_tau: int = 20000
    ln_f0: float = 1.0
    flatness: float = 0.8
    check_every: int = 1000
    ln_f_min: float = 1e-6
    flat_over: str = param(
        "visited",
        "Which bins the flatness counts: visited (the non-zero ones) or x (every x-bin).",
        added=True,
    )

    def __post_init__(self) -> None:
        check_choice("Schedule", "flat_over", self.flat_over, FLAT_OVER)
        if self.kind not in ("ramp", "flat"):
            raise ValueError(f"schedule kind={self.kind!r}; valid: ramp, flat")
        if self.rise < 0 or self.plateau < 0 or self.decay_tau < 1 or self.check_every < 1:
            raise ValueError("rise and plateau must be >= 0, decay_tau and check_every >= 1")

    def ramp(self, t: int) -> float:
        """``ln f`` of the ramp schedule at step `t` (0-based)."""
        if t < self.rise:
            return self.ln_f_max * (t + 1) / self.rise
        t1 = self.rise + self.plateau
        if t < t1:
            return self.ln_f_max
        return self.ln_f_max * self.decay_tau / (self.decay_tau + t - t1)
