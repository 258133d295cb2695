"""Wang-Landau molecular dynamics (WLMD): sampling parameters flat in two collective variables.

Study B's equilibrium models are samples of WLMD on the sphere ``||theta|| = R``. The recipe
(docs/study_b.md, from the authors' earlier work on the high-entropy advantage), generic over any model and task:

* collective variables (`ModelCVs`): ``x = ln(train loss)``, ``y = 10 * mean sigmoid(k margin)``
  on held-out data (margin = correct logit minus the largest other logit);
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
  default) or keeps the force of its last accepted step (``"kept"``: every walk before the
  field, so study B's protocols 1-5, which resume as they ran). Only the fresh force feels what the
  deposits at a walker's bin did while it could not move: a walker close enough to an edge that
  every drift leaves the grid (the thermal step raises ``ln loss`` by second-order terms more
  than its margin) never moves again under a kept force, however much ``S`` grows under it
  (docs/study_b.md, "Why protocol 4's seed 2 stopped moving");
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
it started with: a run folder records a vectorised walk's engine (a folder without one is a
loop walk, as every walk before the field) and `wlmd_run` refuses to resume it with the other.
The state lives on the device of the start (or the `device` given on resume); ``S``, ``H``,
the CVs and the RNG stay on the CPU.

`wlmd_run` runs the entropy phase into a run folder; `wlmd_produce` samples with ``S`` frozen
and saves snapshots in a target window as ordinary checkpoints any analysis can open. Both stop
cleanly on a signal and resume bit-identically (a production of 50,000 steps outlasts a
working session on one core).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interp.config import check_choice, param, to_dict
from interp.errors import CheckpointError, ConfigError, TrainingInterrupted
from interp.metrics import full_precision
from interp.signals import stop_on_signals
from interp.splits import Split
from interp.store.checkpoint import drop_checkpoints
from interp.store.run_folder import checkpoint_dir, truncate_metrics
from interp.store.session import RunSession, open_run
from interp.wlmd.grid import GridSpec, OutOfGrid, Schedule, deposit, flatness, interpolate

CV = Callable[[Tensor], Tensor]  # theta [P] -> (x, y) [2], differentiable

ENGINES = ("loop", "vectorized")
"""How a sampler moves its walkers (`WLMDConfig.engine`; the module docstring says why both)."""

RESUME = "run the same command to continue"
"""How a stopped walk or production continues (`TrainingInterrupted.resume`)."""

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


class ModelCVs:
    """Study B's collective variables of a model, as a function of its flat parameter vector.

    The CVs run `forward`, by default the model's training forward `fast_readout` if it has
    one, else `readout` (for a `models.Transformer`, `models.fast_forward`: for 1 layer, tables
    for everything before attention and the readout position only, the values mixed by one
    `embedding_bag`; no hooks run). Train and held-out rows go through one call. The CVs work
    under `torch.func.vmap` over stacked flat parameters (the sampler's vectorised engine).
    That the CVs and the forces equal the hooked forward's to 1e-5 is tested in
    `tests/oracle/test_wlmd.py`.

    Args:
        model: A model with `readout` (its `fast_readout` is used if present); not modified.
        train: The split whose mean cross-entropy gives ``x = ln(loss)``.
        heldout: The split whose margins give ``y = 10 * mean sigmoid(k * margin)``.
        k: Sharpness of the smooth accuracy (study B: about 5-7).
        forward: ``(model, tokens [batch, pos]) -> readout logits [batch, d_vocab_out]``,
            differentiable in the model's parameters (called under `torch.func.functional_call`).
    """

    def __init__(
        self,
        model: nn.Module,
        train: Split,
        heldout: Split,
        k: float = 6.0,
        *,
        forward: Callable[[nn.Module, Tensor], Tensor] | None = None,
    ) -> None:
        self.model, self.train, self.heldout, self.k = model, train, heldout, k
        self.params = [(name, p.shape) for name, p in model.named_parameters() if p.requires_grad]
        self._call = _Readout(model, forward)
        # One forward over train + held-out (4,489 rows for study B) instead of two: the fast
        # forward's tables are built once per step, and the matmuls get one larger batch.
        same_shape = train.tokens.shape[1:] == heldout.tokens.shape[1:]
        self._tokens = torch.cat([train.tokens, heldout.tokens]) if same_shape else None

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (and of the flat vectors the CVs take)."""
        return next(p.device for _, p in self.model.named_parameters())

    def flatten(self) -> Tensor:
        """The model's current parameters as one vector [P]."""
        return torch.cat([p.detach().flatten() for _, p in self.model.named_parameters() if p.requires_grad])

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """``{name: tensor}`` views of `theta` in the model's shapes."""
        out, start = {}, 0
        for name, shape in self.params:
            n = shape.numel()
            out[name] = theta[start : start + n].view(shape)
            start += n
        return out

    def state_dict(self, theta: Tensor) -> dict[str, Tensor]:
        """A full state dict of the model with parameters `theta` (for `save_checkpoint`)."""
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        state.update({k: v.detach().clone() for k, v in self.unflatten(theta).items()})
        return state

    def __call__(self, theta: Tensor) -> Tensor:
        """The collective variables ``(x, y)`` [2] of the flat parameters `theta` [P], differentiably."""
        params = {f"model.{k}": v for k, v in self.unflatten(theta).items()}
        if self._tokens is not None:
            both = full_precision(torch.func.functional_call(self._call, params, (self._tokens,)))
            logits, held = both[: len(self.train.labels)], both[len(self.train.labels) :]
        else:
            logits = full_precision(torch.func.functional_call(self._call, params, (self.train.tokens,)))
            held = full_precision(torch.func.functional_call(self._call, params, (self.heldout.tokens,)))
        x = F.cross_entropy(logits, self.train.labels).log()
        return torch.stack([x, 10 * torch.sigmoid(self.k * margins(held, self.heldout.labels)).mean()])


def margins(logits: Tensor, labels: Tensor) -> Tensor:
    """Correct logit minus the largest other logit, per example [batch]."""
    correct = logits.gather(1, labels[:, None])[:, 0]
    other = logits.masked_fill(F.one_hot(labels, logits.shape[1]).bool(), float("-inf")).amax(1)
    return correct - other


class _Readout(nn.Module):
    def __init__(self, model: nn.Module, forward: Callable[[nn.Module, Tensor], Tensor] | None) -> None:
        super().__init__()
        self.model, self.readout_fn = model, forward

    def forward(self, tokens: Tensor) -> Tensor:
        if self.readout_fn is not None:
            return self.readout_fn(self.model, tokens)
        return (getattr(self.model, "fast_readout", None) or self.model.readout)(tokens)


def wlmd_run(
    run_dir: str | Path,
    run_config: Mapping[str, Any],
    cvs: ModelCVs,
    theta0: Tensor | None,
    config: WLMDConfig,
    steps: int,
    *,
    checkpoint_every: int = 1000,
    log_every: int = 100,
    meta: Mapping[str, Any] | None = None,
    digests: Mapping[str, str] | None = None,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Sampler:
    """Run (or resume) the entropy phase into `run_dir` until `steps` steps.

    Checkpoints hold walker 0's model state dict (so analyses open them) and the whole sampler
    state under ``train_state["wlmd"]``; `metrics.jsonl` logs ln f, flatness, walls and each
    walker's (x, y) every `log_every` steps. `digests` (of the splits the CVs are measured on)
    are stored with every checkpoint and checked on resume, as for training runs. The walk runs
    on the device of `cvs`' model (and `theta0`). `migrate` turns an existing folder's config
    into the current form before it is compared (`interp.store.run_folder.check_same_config`).

    Raises:
        ConfigError: If `run_dir` holds a walk of the other engine (`check_walk_engine`), or
            another config.
        TrainingInterrupted: On SIGINT / SIGTERM / SIGHUP, after saving a checkpoint at the
            step reached (the same call resumes from it, bit-identically).
    """
    check_walk_engine(run_dir, config.engine)
    with open_run(run_dir, {**run_config, "wlmd": to_dict(config)}, digests, migrate=migrate) as run:
        ckpt = run.resume()
        if ckpt is not None:
            sampler = Sampler(cvs, config, state=ckpt.train_state["wlmd"], device=cvs.device)
        else:
            sampler = Sampler(cvs, config, theta0)
            _save(run, sampler, cvs, meta)
        with stop_on_signals() as stop:
            while sampler.step < steps:
                if stop.signum is not None:  # a stop between steps: nothing since the last save is lost
                    if run.checkpoints()[-1] != sampler.step:
                        _save(run, sampler, cvs, meta)
                    raise TrainingInterrupted(
                        stop.signum, sampler.step, run.run_dir, unit="step", resume=RESUME
                    )
                sampler.advance()
                if sampler.step % log_every == 0:
                    run.log(
                        {
                            "step": sampler.step,
                            "ln_f": sampler.current_ln_f(),
                            "walls": sampler.walls,
                            "flatness": flatness(sampler.H.sum(0), config.schedule.flat_over),
                            "cv": sampler.cv.tolist(),
                        }
                    )
                if sampler.step % checkpoint_every == 0 or sampler.step == steps:
                    _save(run, sampler, cvs, meta)
    return sampler


def check_walk_engine(run_dir: str | Path, engine: str) -> None:
    """Refuse to resume a walk with another engine than the one its run folder records.

    The engines agree only up to rounding, so a walk that switched half-way would resume
    bit-identically with neither. A folder without a config passes; one whose ``wlmd`` section
    has no ``engine`` was walked by the loop (every walk before the field).

    Raises:
        ConfigError: Naming the folder, the engine it records and the one asked for.
    """
    from interp.store.run_folder import CONFIG_FILE, read_config

    if not (Path(run_dir) / CONFIG_FILE).exists():
        return
    wlmd = read_config(run_dir).get("wlmd")
    recorded = wlmd.get("engine", "loop") if isinstance(wlmd, Mapping) else "loop"
    if recorded != engine:
        raise ConfigError(
            f"{run_dir} is a walk of the {recorded} engine, not the {engine} one: the engines agree "
            "only up to rounding, so a walk resumes with the engine it started with",
            f"resume it with engine {recorded!r}" + (" (--vectorize)" if recorded == "vectorized" else ""),
        )


def _save(run: RunSession, sampler: Sampler, cvs: ModelCVs, meta: Mapping[str, Any] | None) -> None:
    run.save(
        sampler.step,
        cvs.state_dict(sampler.theta[0]),
        {"wlmd": sampler.state_dict()},
        meta={**(meta or {}), "cv": sampler.cv[0].tolist()},
    )


PROGRESS_DIR = "progress"
"""The run folder inside a production folder that holds its resume point (`wlmd_produce`)."""


def wlmd_produce(
    out_dir: str | Path,
    run_config: Mapping[str, Any],
    cvs: ModelCVs,
    sampler: Sampler,
    steps: int,
    window: tuple[float, float, float, float],
    *,
    every: int = 1,
    max_samples: int | None = None,
    checkpoint_every: int = 1000,
    meta: Mapping[str, Any] | None = None,
    digests: Mapping[str, str] | None = None,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[Path]:
    """Sample with S frozen; save each walker state whose (x, y) is in `window` as a checkpoint.

    Production resumes: every `checkpoint_every` steps, and at a stop signal, the sampler's whole
    state and the number of samples saved so far are checkpointed in ``out_dir/progress`` (a run
    folder of its own). Called again, it continues from there bit-identically (same samples, same
    order), re-saving any sample a killed process wrote after that point. ``progress`` is deleted
    once DONE is written.

    Args:
        out_dir: The production's run folder; checkpoint `n` is the n-th sample (meta: x, y,
            walker, sampler step). DONE is written at the end.
        run_config: The config.json content (model, task, `train`); a ``wlmd_production``
            section with the window and steps is added.
        cvs: The collective variables the walkers are measured in.
        sampler: The sampler after its entropy phase (`wlmd_run`); it is advanced in place (on
            resume, first set to the saved state; left as it is when `out_dir` holds a finished
            production).
        steps: Production steps.
        window: ``(x_lo, x_hi, y_lo, y_hi)``, inclusive.
        every: Look at the walkers every this many steps (decorrelation).
        max_samples: Stop after this many samples.
        checkpoint_every: Save the resume point every this many production steps.
        meta: More checkpoint metadata.
        digests: Split digests of the CVs' data, stored with every sample.
        migrate: Turns an existing folder's config into the current form (as `wlmd_run`'s).

    Returns:
        The checkpoint folders of the samples (those of a finished production when `out_dir`
        holds one).

    Raises:
        CheckpointError: If `out_dir` holds samples but no resume point (a production of an
            `interp` before this one: it cannot continue; sample into a new folder), or a resume
            point of a production that started from another step of the walk than `sampler`'s
            (the walk went on since).
        TrainingInterrupted: On SIGINT / SIGTERM / SIGHUP, after saving the resume point at the
            step reached.
    """
    production = {"window": list(window), "steps": steps, "every": every, "max_samples": max_samples}
    if sampler.config.engine != "loop":  # recorded as the entropy phase records it: only when not the loop
        production["engine"] = sampler.config.engine
    config = {**run_config, "wlmd_production": production}
    x_lo, x_hi, y_lo, y_hi = window
    with open_run(out_dir, config, digests, migrate=migrate) as run:
        if run.finished() is not None:
            shutil.rmtree(run.run_dir / PROGRESS_DIR, ignore_errors=True)  # a kill after DONE left it
            return [checkpoint_dir(run.run_dir, s) for s in run.checkpoints()]
        with open_run(run.run_dir / PROGRESS_DIR, config, digests, migrate=migrate) as progress:
            start, saved = _production_start(run, progress, sampler, cvs)
            with stop_on_signals() as stop:
                while sampler.step - start < steps and (max_samples is None or len(saved) < max_samples):
                    if stop.signum is not None:
                        # Saved again at the same step, the only resume point would be replaced,
                        # and a kill in the middle would leave none.
                        if progress.checkpoints()[-1] != sampler.step - start:
                            _save_progress(progress, sampler, cvs, start, len(saved))
                        raise TrainingInterrupted(
                            stop.signum, sampler.step - start, progress.run_dir, "production step", RESUME
                        )
                    sampler.advance()
                    if sampler.step % every == 0:  # the sampler's own step: as productions always looked
                        for w in range(sampler.n_walkers):
                            x, y = sampler.cv[w].tolist()
                            inside = x_lo <= x <= x_hi and y_lo <= y <= y_hi
                            if inside and (max_samples is None or len(saved) < max_samples):
                                info = {"x": x, "y": y, "walker": w, "sampler_step": sampler.step}
                                state = cvs.state_dict(sampler.theta[w])
                                saved.append(run.save(len(saved), state, None, meta={**(meta or {}), **info}))
                                run.log({"step": len(saved) - 1, **info})
                    if (sampler.step - start) % checkpoint_every == 0:
                        _save_progress(progress, sampler, cvs, start, len(saved))
        run.finish({"samples": len(saved), "steps": steps, "window": list(window)})
    shutil.rmtree(run.run_dir / PROGRESS_DIR)  # after DONE: a kill in between leaves a finished production
    return saved


def _production_start(
    run: RunSession, progress: RunSession, sampler: Sampler, cvs: ModelCVs
) -> tuple[int, list[Path]]:
    """Where `wlmd_produce` starts: the sampler step its production started at and the samples
    saved so far. `sampler` is set to the resume point's state when there is one; a fresh
    production freezes it and saves its first resume point.
    """
    ckpt = progress.resume()
    if ckpt is None:
        if run.checkpoints():
            raise CheckpointError(
                f"{run.run_dir} holds samples but no resume point ({PROGRESS_DIR}/): an older interp "
                "wrote it, whose production could not resume",
                "sample into a new folder, or delete this one to sample again from the walk's end",
            )
        sampler.frozen = True
        _save_progress(progress, sampler, cvs, sampler.step, 0)
        return sampler.step, []
    start = int(ckpt.meta["start"])
    if start != sampler.step:
        raise CheckpointError(
            f"{run.run_dir} is a production that started from step {start} of its walk, which now "
            f"ends at step {sampler.step} (the walk went on since)",
            f"delete {run.run_dir} to sample from the walk's new end",
        )
    sampler.load_state_dict(ckpt.train_state["wlmd"])
    count = int(ckpt.meta["samples"])
    # Samples a killed process saved after the resume point are saved again (the same ones).
    drop_checkpoints(run.run_dir, [s for s in run.checkpoints() if s >= count])
    truncate_metrics(run.run_dir, count - 1)
    return start, [checkpoint_dir(run.run_dir, s) for s in range(count)]


def _save_progress(progress: RunSession, sampler: Sampler, cvs: ModelCVs, start: int, samples: int) -> None:
    """Checkpoint production's resume point (at its own step count); keep the one before it.

    Two, not one: a copy of the newest (`study_b_state.export_state`, while production runs)
    then never races its deletion.
    """
    progress.save(
        sampler.step - start,
        cvs.state_dict(sampler.theta[0]),
        {"wlmd": sampler.state_dict()},
        meta={"start": start, "samples": samples},
    )
    drop_checkpoints(progress.run_dir, progress.checkpoints()[:-2])


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
