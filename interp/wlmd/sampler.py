"""Wang-Landau molecular dynamics (WLMD): sampling parameters flat in two collective variables.

The sampler draws parameter vectors ``theta`` whose histogram is flat in two collective
variables (CVs, e.g. `interp.wlmd.cvs.ModelCVs`), generic over any model and task:

* potential ``U(theta) = kT * S(x(theta), y(theta))`` with ``S`` the running entropy estimate
  on a grid (`interp.wlmd.grid`), so the stationary weight is ``exp(-S)``: flat in ``(x, y)``
  once ``S = ln g``. (``kT`` only sets the velocity scale; with ``kT = 1`` the force is exactly
  ``-grad S``.)
* velocity Verlet with unit mass, then an Ornstein-Uhlenbeck thermostat
  ``v <- (1 - gamma) v + sqrt(gamma (2 - gamma) kT) xi``;
* the sphere (``radius``): velocities and noise are projected onto the tangent space and the
  position renormalised after every drift (RATTLE-style);
* the wall: a drift that leaves the grid is undone and the velocity reversed (a reflecting hard
  wall, the standard way to confine Hamiltonian dynamics; the rejected step counts as a visit
  of the current bin, as in Monte-Carlo Wang-Landau). The reflected walker has its force
  recomputed at its unmoved position under the current ``S`` (``wall_force="fresh"``, the
  default) or keeps the force of its last accepted step (``"kept"``: every walk written before
  the field, which resume as they ran). Only the fresh force feels what the deposits at a
  walker's bin did while it could not move: a walker close enough to an edge that every drift
  leaves the grid (the thermal step raises the first CV by second-order terms more than its
  margin) never moves again under a kept force, however much ``S`` grows under it;
* after each step, ``ln f`` times a Gaussian kernel is added to the walker's copy of ``S``
  around its bin; walkers average their copies every `share_every` steps. The half-kick after
  a deposit uses the force cached before it (one gradient per step; exact once ``S`` is frozen);
* the whole state (``S``, histograms, positions, velocities, forces, RNG, step, schedule) is a
  dict of tensors and numbers: checkpointed through `interp.store.checkpoint`, resumed bit-identically.

Two engines move the walkers (`WLMDConfig.engine`). ``"loop"`` (the default) moves them one
after the other, each with its own forward and backward through the CVs. ``"vectorized"``
computes every walker's CVs in one `torch.func.vmap` forward over the stacked flat parameters
``[n_walkers, P]`` and every force ``-kT grad S`` in one backward, then does the per-walker
bookkeeping (wall reflection, deposits, histograms) as the loop does, drawing the same noise in
the same order: the way to fill a GPU. It is opt-in and recorded because the two agree only up
to rounding (batched matmuls sum in another order; equal to 1e-10 in float64, tested in
`tests/oracle/test_wlmd_vectorized.py`), so a walk resumes bit-identically only with the engine
it started with (`interp.wlmd.runs.wlmd_run` refuses the other: `WLMD_ENGINE`).
The state lives on the device of the start (or the `device` given on resume); ``S``, ``H``,
the CVs and the RNG stay on the CPU.

Walks into run folders (the entropy phase, production) are `interp.wlmd.runs`; `walk_record`
says how far a walk has come.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from interp.config import check_choice, param
from interp.wlmd.grid import GridSpec, OutOfGrid, Schedule, deposit, flatness, interpolate

CV = Callable[[Tensor], Tensor]  # theta [P] -> (x, y) [2], differentiable

ENGINES = ("loop", "vectorized")
"""How a sampler moves its walkers (`WLMDConfig.engine`; the module docstring says why both)."""

WLMD_ENGINE: dict[str, Any] = {
    "section": "wlmd",
    "default": "loop",  # every walk before the field
    "hints": {
        "vectorized": "resume it with engine 'vectorized' (--vectorize)",
        "loop": "resume it with engine 'loop'",
    },
    "verb": "walked",
}
"""How `interp.store.run_folder.check_engine` reads a walk's engine from its run folder."""

WALL_FORCES = ("kept", "fresh")
"""The force on a reflected walker (`WLMDConfig.wall_force`; the module docstring says why)."""


@dataclass(frozen=True)
class WLMDConfig:
    """WLMD settings.

    Attributes:
        grid: The (x, y) grid of the entropy estimate.
        schedule: The ln f schedule.
        sigma: Gaussian kernel width per axis, in bins (0: one bin).
        dt: Verlet time step.
        gamma: Thermostat friction per step, in (0, 1].
        kT: Thermostat temperature (velocity scale).
        radius: Sphere ``||theta|| = radius``, or None for no constraint.
        share_every: Walkers average their S every this many steps.
        seed: Seed of initial velocities and thermostat noise.
        engine: ``"loop"`` (walkers one after the other) or ``"vectorized"`` (every walker's CVs
            and force in one vmap forward and backward; the CV function must be vmap-able).
        wall_force: A reflected walker's force: ``"fresh"`` (recomputed at its position under
            the current S: one more forward and backward per reflection) or ``"kept"`` (its
            last accepted step's; what a run folder without the field ran).
    """

    grid: GridSpec
    schedule: Schedule = field(default_factory=Schedule)
    sigma: tuple[float, float] = (1.0, 1.0)
    dt: float = 0.01
    gamma: float = 0.1
    kT: float = 1.0
    radius: float | None = None
    share_every: int = 100
    seed: int = 0
    engine: str = param("loop", "loop or vectorized (see ENGINES).", added=True)
    # Every walk before the field kept the force: a folder that does not record it resumes with
    # the dynamics it started with, a new walk gets the fresh force.
    wall_force: str = param("fresh", "fresh or kept (see WALL_FORCES).", absent="kept")

    def __post_init__(self) -> None:
        check_choice("WLMDConfig", "engine", self.engine, ENGINES)
        check_choice("WLMDConfig", "wall_force", self.wall_force, WALL_FORCES)


class Sampler:
    """Several WLMD walkers sharing one entropy estimate.

    Args:
        cv: Maps a flat parameter vector [P] to its collective variables [2], differentiably.
        config: The settings.
        theta0: Initial positions [n_walkers, P] (projected onto the sphere if `radius`); the
            walk runs on their device.
        state: A `state_dict()` to resume from instead (then `theta0` is ignored).
        device: With `state`: the device of positions, velocities and forces (default: the
            state's own, the CPU after a checkpoint load).

    Raises:
        OutOfGrid: If a walker starts outside the grid.
    """

    def __init__(
        self,
        cv: CV,
        config: WLMDConfig,
        theta0: Tensor | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        self.cv_fn, self.config, self.spec = cv, config, config.grid
        if state is not None:
            self._load(state, device)
            return
        n = theta0.shape[0]
        self.gen = torch.Generator().manual_seed(config.seed)
        self.theta = theta0.detach().clone()
        if config.radius is not None:
            self.theta *= config.radius / self.theta.norm(dim=1, keepdim=True)
        self.S = torch.zeros(n, self.spec.n_x, self.spec.n_y, dtype=torch.float64)
        self.H = torch.zeros_like(self.S)
        self.step, self.ln_f, self.halvings, self.walls, self.frozen = 0, config.schedule.ln_f0, 0, 0, False
        if config.engine == "vectorized":
            self.cv, self.force, inside = self._cv_force_all(self.theta)
            outside = [w for w in range(n) if not inside[w]]
        else:
            self.cv = torch.zeros(n, 2, dtype=torch.float64)
            self.force = torch.zeros_like(self.theta)
            outside = []
            for w in range(n):
                cv_w, f_w = self._cv_force(self.theta[w], self.S[w])
                if cv_w is None:
                    outside.append(w)
                    break
                self.cv[w], self.force[w] = cv_w, f_w
        if outside:
            raise OutOfGrid(f"walker {outside[0]} starts outside the grid (widen the grid or move the start)")
        self.v = torch.zeros_like(self.theta)
        for w in range(n):
            self.v[w] = self.tangent(self._noise(self.theta[w]) * config.kT**0.5, self.theta[w])

    @property
    def n_walkers(self) -> int:
        """Number of walkers."""
        return self.theta.shape[0]

    def state_dict(self) -> dict[str, Any]:
        """Everything that determines the future, as tensors and plain numbers (weights_only-safe)."""
        return {
            "theta": self.theta.clone(),
            "v": self.v.clone(),
            "force": self.force.clone(),
            "cv": self.cv.clone(),
            "S": self.S.clone(),
            "H": self.H.clone(),
            "rng": self.gen.get_state(),
            "step": self.step,
            "ln_f": self.ln_f,
            "halvings": self.halvings,
            "walls": self.walls,
            "frozen": self.frozen,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (a `state_dict()`), on the device the positions are on now."""
        self._load(state, self.theta.device)

    def _load(self, state: Mapping[str, Any], device: str | torch.device | None) -> None:
        for key in ("theta", "v", "force", "cv", "S", "H"):
            setattr(self, key, state[key].clone())
        if device is not None:  # S, H and the CVs stay on the CPU (per-walker bookkeeping)
            self.theta, self.v, self.force = (t.to(device) for t in (self.theta, self.v, self.force))
        self.gen = torch.Generator()
        self.gen.set_state(state["rng"])
        self.step, self.ln_f, self.halvings = int(state["step"]), float(state["ln_f"]), int(state["halvings"])
        self.walls, self.frozen = int(state["walls"]), bool(state["frozen"])

    def current_ln_f(self) -> float:
        """The ln f the next step deposits (0 when frozen or the flat schedule has finished)."""
        sched = self.config.schedule
        if self.frozen:
            return 0.0
        if sched.kind == "ramp":
            return sched.ramp(self.step)
        return self.ln_f if self.ln_f >= sched.ln_f_min else 0.0

    def entropy(self) -> Tensor:
        """The walker-averaged entropy estimate [n_x, n_y]."""
        return self.S.mean(0)

    def run(self, steps: int) -> None:
        """Advance every walker by `steps` steps."""
        for _ in range(steps):
            self.advance()

    def advance(self) -> None:
        """One step of every walker, the S deposits, sharing and the schedule."""
        ln_f, cfg = self.current_ln_f(), self.config
        vectorized = cfg.engine == "vectorized"
        if vectorized:
            self._move_all()
        for w in range(self.n_walkers):
            if not vectorized:
                self._move(w)
            if not self.frozen:
                i, j = self.spec.index(*self.cv[w].tolist())
                self.H[w, i, j] += 1
                if ln_f > 0:
                    deposit(self.S[w], self.spec, i, j, ln_f, cfg.sigma)
        self.step += 1
        if self.n_walkers > 1 and self.step % cfg.share_every == 0 and not self.frozen:
            self.S[:] = self.S.mean(0, keepdim=True)
        sched = cfg.schedule
        if sched.kind == "flat" and not self.frozen and self.step % sched.check_every == 0:
            if flatness(self.H.sum(0), sched.flat_over) >= sched.flatness and self.ln_f >= sched.ln_f_min:
                self.ln_f, self.halvings = self.ln_f / 2, self.halvings + 1
                self.H.zero_()

    def tangent(self, v: Tensor, theta: Tensor) -> Tensor:
        """`v` [P] projected onto the sphere's tangent space at `theta` [P] (`v` itself without a sphere)."""
        if self.config.radius is None:
            return v
        return v - (v @ theta) / (theta @ theta) * theta

    def force_at(self, theta: Tensor, walker: int = 0) -> tuple[Tensor | None, Tensor]:
        """The CVs (float64 [2]; None outside the grid) and the bias force ``-kT grad S`` [P] at
        `theta` [P] under walker `walker`'s S: what that walker's step computes there.
        """
        return self._cv_force(theta, self.S[walker])

    def _cv_force(self, theta: Tensor, S: Tensor) -> tuple[Tensor | None, Tensor]:
        """CVs (float64 [2]) and force ``-kT grad S`` at `theta`; None CVs outside the grid."""
        with torch.enable_grad():
            t = theta.detach().requires_grad_(True)
            cv = self.cv_fn(t)
            x, y = (float(c) for c in cv.detach())
            if not self.spec.contains(x, y):
                return None, torch.zeros_like(theta)
            s = interpolate(S, self.spec, cv)
            (grad,) = torch.autograd.grad(s, t, allow_unused=True) if s.requires_grad else (None,)
        grad = torch.zeros_like(theta) if grad is None else grad
        return cv.detach().double(), -self.config.kT * grad.detach()

    def _noise(self, like: Tensor) -> Tensor:
        """A standard normal vector shaped like `like` [P], from the CPU generator, on its device."""
        return torch.randn(like.shape, generator=self.gen, dtype=like.dtype).to(like.device)

    def drift(self, theta: Tensor, v: Tensor, force: Tensor) -> tuple[Tensor, Tensor]:
        """The half-kicked tangent velocity and the position it drifts to (back on the sphere):
        the part of a step before the grid is checked, for one walker (all [P]).
        """
        cfg = self.config
        v = self.tangent(v + 0.5 * cfg.dt * force, theta)
        new = theta + cfg.dt * v
        if cfg.radius is not None:
            new = new * (cfg.radius / new.norm())
        return v, new

    def _move(self, w: int) -> None:
        cfg = self.config
        theta, force = self.theta[w], self.force[w]
        v, new = self.drift(theta, self.v[w], force)
        cv, new_force = self._cv_force(new, self.S[w])
        if cv is None:  # the wall: undo the drift, reverse the velocity
            new, v, cv = theta, -v, self.cv[w]
            new_force = force if cfg.wall_force == "kept" else self._cv_force(theta, self.S[w])[1]
            self.walls += 1
        else:
            v = self.tangent(v + 0.5 * cfg.dt * new_force, new)
        noise = self.tangent(self._noise(new), new)
        v = (1 - cfg.gamma) * v + (cfg.gamma * (2 - cfg.gamma) * cfg.kT) ** 0.5 * noise
        self.theta[w], self.v[w], self.force[w], self.cv[w] = new, v, new_force, cv

    def _tangent_rows(self, v: Tensor, theta: Tensor) -> Tensor:
        """`tangent` of every row: v, theta [n_walkers, P]."""
        if self.config.radius is None:
            return v
        return v - (v * theta).sum(1, keepdim=True) / (theta * theta).sum(1, keepdim=True) * theta

    def _cv_force_all(self, theta: Tensor) -> tuple[Tensor, Tensor, list[bool]]:
        """Every walker's CVs (float64 [n, 2], CPU), force ``-kT grad S`` [n, P] and whether it
        is inside the grid, from one vmap forward and one backward (the vectorised engine).

        ``dS/d(x, y)`` is taken per walker on the CPU (a few bilinear weights), then pulled back
        through the batched CV graph in one backward: walkers are independent, so the gradient
        of ``sum_w <dS/dcv_w, cv_w>`` in ``theta_w`` is walker w's own. Outside the grid the
        force is 0 (`_move_all` keeps the previous one, or recomputes it at the unmoved position).
        """
        with torch.enable_grad():
            t = theta.detach().requires_grad_(True)
            cv = torch.func.vmap(self.cv_fn)(t)
            values = cv.detach().double().cpu()
            inside = [self.spec.contains(*row) for row in values.tolist()]
            slope = torch.zeros_like(values)
            for w in range(len(inside)):
                if inside[w]:
                    point = values[w].clone().requires_grad_(True)
                    s = interpolate(self.S[w], self.spec, point)
                    if s.requires_grad:
                        (slope[w],) = torch.autograd.grad(s, point)
            grad = None
            if any(inside) and cv.requires_grad:
                (grad,) = torch.autograd.grad(cv, t, slope.to(cv), allow_unused=True)
        grad = torch.zeros_like(theta) if grad is None else grad
        return values, -self.config.kT * grad.detach(), inside

    def _move_all(self) -> None:
        """One step of every walker at once: `_move` of each, with one batched force evaluation."""
        cfg = self.config
        theta, force = self.theta, self.force
        v = self._tangent_rows(self.v + 0.5 * cfg.dt * force, theta)
        new = theta + cfg.dt * v
        if cfg.radius is not None:
            new = new * (cfg.radius / new.norm(dim=1, keepdim=True))
        cv, new_force, inside = self._cv_force_all(new)
        keep = torch.tensor(inside, device=theta.device)[:, None]
        # The wall (rows outside the grid): undo the drift, reverse the velocity, keep the force
        # or recompute it where the walker stayed (every row in one more batched evaluation).
        if cfg.wall_force == "fresh" and not all(inside):
            force = self._cv_force_all(theta)[1]
        new, new_force = torch.where(keep, new, theta), torch.where(keep, new_force, force)
        v = torch.where(keep, self._tangent_rows(v + 0.5 * cfg.dt * new_force, new), -v)
        cv = torch.where(keep.cpu(), cv, self.cv)
        self.walls += inside.count(False)
        # The same draws in the same order as the loop (walker 0's noise first).
        noise = self._tangent_rows(torch.stack([self._noise(row) for row in new]), new)
        v = (1 - cfg.gamma) * v + (cfg.gamma * (2 - cfg.gamma) * cfg.kT) ** 0.5 * noise
        self.theta, self.v, self.force, self.cv = new, v, new_force, cv


def walk_record(sampler: Sampler, start: Tensor, previous_S: Tensor | None = None) -> dict[str, Any]:
    """How far a walk has come: a JSON-ready record of the sampler now.

    Args:
        sampler: The sampler.
        start: The walkers' start ``[P]`` (or ``[n_walkers, P]``); cosines are measured to it.
        previous_S: The walker-averaged ``S`` ``[n_x, n_y]`` of the previous record, or None.

    Returns:
        ``step``, per walker ``cosine`` (to the start), ``distance``, ``x``, ``y``; ``flatness``
        of the summed histogram (min / mean over the bins the schedule's ``flat_over`` names:
        the visited ones by default), ``visited`` bins, ``ln_f``,
        ``walls``, ``S_change`` (max over visited bins of the change of ``S`` since
        `previous_S`, both shifted to mean 0 over those bins: S is defined up to a constant;
        None without a previous record) and ``S`` (the walker-averaged grid, as lists).
    """
    start = start.expand_as(sampler.theta)
    cosine = F.cosine_similarity(sampler.theta.double(), start.double(), dim=1)
    H = sampler.H.sum(0)
    S = sampler.entropy()
    change = None
    visited = H > 0
    if previous_S is not None and bool(visited.any()):
        now, before = S[visited], previous_S.to(S.dtype)[visited]
        change = float(((now - now.mean()) - (before - before.mean())).abs().max())
    return {
        "step": sampler.step,
        "cosine": cosine.tolist(),
        "distance": (sampler.theta - start).norm(dim=1).tolist(),
        "x": sampler.cv[:, 0].tolist(),
        "y": sampler.cv[:, 1].tolist(),
        "flatness": flatness(H, sampler.config.schedule.flat_over),
        "visited": int(visited.sum()),
        "ln_f": sampler.current_ln_f(),
        "walls": sampler.walls,
        "S_change": change,
        "S": S.tolist(),
    }
