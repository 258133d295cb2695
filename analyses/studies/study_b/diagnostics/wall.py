"""Study B: why protocol 2's walker stays at the upper ln-loss wall (a diagnostic, not a study run).

Every protocol-2 walk so far reached the grid's upper x edge (the production window's upper
edge, ``x0 + 0.25``) within its first 5,000 steps and stayed there, its histogram never flat.
Two causes can hold it there, and this module tells them apart on a walk's saved state:

* **The grid's edge.** ``S`` is bilinear between bin centres and, as protocol 2 ran it, flat
  between the outermost centre and the edge (`interp.wlmd.grid`, ``edges="flat"``): in that
  half-bin the bias exerts no force at all, so however much ``S`` has grown there, nothing
  pushes a walker back into the grid.
* **The entropy itself.** If the density of states rises faster with ``x`` than the bias
  ``S`` does, the walker stays at the wall even with the force restored.

`wall_force` measures the bias force at the walker's saved position with either kind of edge;
`continue_walk` continues the saved state (read-only: the walk's folder is not touched) for a
few thousand steps with the outermost slope carried to the edge (``edges="linear"``), with the
walk's own ``ln f`` schedule or the classic one (``ln f = 1``, halved whenever the visited
histogram is flat), with the force a reflected walker keeps or a fresh one
(`interp.wlmd.sampler.WALL_FORCES`), and records where the walker goes.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from analyses.studies.study_b.settings import WLMDSettings
from interp.config import from_dict
from interp.store.checkpoint import load_checkpoint
from interp.wlmd.grid import Schedule
from interp.wlmd.sampler import Sampler, WLMDConfig

K = WLMDSettings().k
"""The smooth-accuracy CV's sharpness of every study-B walk (protocols 1 and 2)."""

SCHEDULES = ("walk", "classic")
"""`continue_walk`'s ``ln f``: the walk's own schedule, or the classic one restarted at 1."""


def _saved_walk(
    entropy: str | Path, edges: str, schedule: str = "walk", k: float = K, wall_force: str | None = None
) -> Sampler:
    """The sampler of a walk's newest checkpoint, with `edges` (and `k`, the smooth-accuracy
    CV's sharpness, which a walk's folder does not record: study B's settings hold it), and
    `wall_force` if given (default: the walk's own).
    """
    from analyses.studies.study_b.protocol import model_cvs
    from interp.config import check_choice
    from models import model_from_checkpoint

    check_choice("continue_walk", "schedule", schedule, SCHEDULES)
    ckpt = load_checkpoint(entropy)  # weights and the sampler's state, read once
    model = model_from_checkpoint(ckpt)
    config = from_dict(WLMDConfig, ckpt.config["wlmd"])
    config = dataclasses.replace(config, grid=dataclasses.replace(config.grid, edges=edges))
    if wall_force is not None:
        config = dataclasses.replace(config, wall_force=wall_force)
    if schedule == "classic":
        config = dataclasses.replace(config, schedule=Schedule(kind="flat", ln_f0=1.0))
    cvs = model_cvs(model, ckpt.config, k)[0]
    sampler = Sampler(cvs, config, state=ckpt.train_state["wlmd"])
    if schedule == "classic":
        sampler.ln_f, sampler.halvings = 1.0, 0
        sampler.H.zero_()
    return sampler


def wall_force(entropy: str | Path, edges: str, *, k: float = K) -> dict[str, float]:
    """The bias force on walker 0 at its saved position, along the direction that raises x.

    Returns:
        ``x``, ``y``: the walker's collective variables; ``x_edge`` and ``x_top_centre``: the
        grid's upper x edge and its outermost centre; ``force``: the norm of the force's
        tangential part under the saved S; ``along_x``: its component along the unit tangential
        gradient of x (negative: it pushes the walker to lower loss; 0 in a flat edge's
        half-bin); ``kept_force`` and ``kept_along_x``: the same of the force the walker carries
        (computed at its last accepted step, under the S of then); ``drift_dx``: how far the
        walker's next drift (saved velocity, carried force, no noise) would move x, and
        ``drift_dx_linear``: its first-order part ``grad x . drift`` (the rest is curvature).
    """
    sampler = _saved_walk(entropy, edges, k=k)
    theta = sampler.theta[0]
    with torch.enable_grad():
        t = theta.detach().requires_grad_(True)
        (grad_x,) = torch.autograd.grad(sampler.cv_fn(t)[0], t)
    cv, force = sampler.force_at(theta)
    tangent_x = sampler.tangent(grad_x, theta)
    unit_x = tangent_x / tangent_x.norm()
    tangent_force, kept = sampler.tangent(force, theta), sampler.tangent(sampler.force[0], theta)
    _, drift = sampler.drift(theta, sampler.v[0], sampler.force[0])  # the step's next try
    with torch.no_grad():
        drift_x = float(sampler.cv_fn(drift)[0])
    centres_x, _ = sampler.spec.centres()
    return {
        "x": float(cv[0]),
        "y": float(cv[1]),
        "x_edge": sampler.spec.x_range[1],
        "x_top_centre": float(centres_x[-1]),
        "force": float(tangent_force.norm()),
        "along_x": float(tangent_force @ unit_x),
        "kept_force": float(kept.norm()),
        "kept_along_x": float(kept @ unit_x),
        "drift_dx": drift_x - float(cv[0]),
        "drift_dx_linear": float(grad_x @ (drift - theta)),
    }


def continue_walk(
    entropy: str | Path,
    steps: int,
    *,
    edges: str = "linear",
    schedule: str = "walk",
    log_every: int = 100,
    k: float = K,
    wall_force: str | None = None,
) -> dict[str, Any]:
    """Continue a walk's newest saved state for `steps` steps in memory and record the walker.

    Args:
        entropy: The walk's entropy-phase run folder (``seed_N/wlmd/entropy``), or a copy of it.
        steps: Steps to take.
        edges: How S continues beyond the outermost centres (`interp.wlmd.grid.EDGES`).
        schedule: ``"walk"`` (the walk's own ``ln f`` schedule, continued) or ``"classic"``
            (``ln f`` restarted at 1 and halved whenever the visited histogram is flat).
        log_every: Steps between records of walker 0's ``(x, y)``.
        k: The smooth-accuracy CV's sharpness the walk ran with.
        wall_force: The force on a reflected walker (`interp.wlmd.sampler.WALL_FORCES`;
            default: the walk's own).

    Returns:
        The settings (``wall_force`` the one used), ``log`` (step, x, y, wall reflections so
        far, ln f), the walker's ``x_range`` over the continuation, ``bins`` (bins visited in
        it), ``walls``, the final ``S`` of walker 0 and the seconds it took.
    """
    sampler = _saved_walk(entropy, edges, schedule, k, wall_force)
    start_step, start_walls = sampler.step, sampler.walls
    # The bins every walker visits, counted here: the classic schedule resets the histogram.
    visited: set[tuple[int, int]] = set()
    log, began = [], time.perf_counter()
    for _ in range(steps):
        sampler.advance()
        # A walker's CVs are always inside the grid (a move that leaves it is undone).
        visited.update(sampler.spec.index(x, y) for x, y in sampler.cv.tolist())
        if (sampler.step - start_step) % log_every == 0:
            x, y = sampler.cv[0].tolist()
            log.append(
                {
                    "step": sampler.step,
                    "x": x,
                    "y": y,
                    "walls": sampler.walls - start_walls,
                    "ln_f": sampler.current_ln_f(),
                }
            )
    xs = [r["x"] for r in log]
    return {
        "entropy": str(entropy),
        "edges": edges,
        "schedule": schedule,
        "wall_force": sampler.config.wall_force,
        "from_step": start_step,
        "steps": steps,
        "x_edge": sampler.spec.x_range[1],
        "x_top_centre": float(sampler.spec.centres()[0][-1]),
        "x_range": [min(xs), max(xs)] if xs else None,
        "bins": len(visited),
        "walls": sampler.walls - start_walls,
        "halvings": sampler.halvings,
        "S": sampler.S[0].tolist(),
        "seconds": time.perf_counter() - began,
        "log": log,
    }
