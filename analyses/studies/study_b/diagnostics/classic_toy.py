"""Study B: how far the classic Wang-Landau schedule's entropy is from the truth at each halving.

Protocols 3-6 stopped their walks after 4 halvings of ``ln f`` from 10, at ``ln f = 0.625``,
arguing then that a stage leaves errors in S of about its ``ln f``. This measures that on a toy
whose density of states is known: ``E = |theta|^2`` in ``d = 6`` dimensions, where
``ln g(E) = (d/2 - 1) ln E + const``, on the x-grid of the classic schedule's oracle test
(`tests/oracle/test_wlmd_classic.py`: E from 1 to 4 in 10 bins, two walkers), walked under the
protocols' schedule (``ln f`` halved whenever the histogram is 80% flat over every x-bin).

`errors_by_halving` walks one seed from ``ln_f0`` down to ``final_ln_f`` and records, after each
halving, S's largest deviation from the exact ``ln g`` at the bin centres (both shifted to mean 0
over the bins) and S's least-squares slope against ``ln E`` (exact: ``d/2 - 1 = 2``). The
oracle's time step 0.1 cannot follow the S that ``ln f = 10`` builds on this toy (the walk
diverges), so the protocols' start is walked at a time step of 0.01.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from interp.wlmd.grid import GridSpec, Schedule
from interp.wlmd.sampler import Sampler, WLMDConfig

D = 6
"""The toy's dimension: ln g(E) = (D/2 - 1) ln E + const."""

CHECK_EVERY = 100
"""Steps between flatness checks (the oracle test's)."""


def _energy(theta: torch.Tensor) -> torch.Tensor:
    """The toy's collective variables: x = |theta|^2, y pinned at 0.5 (one y-bin)."""
    return torch.stack([(theta * theta).sum(), torch.full((), 0.5, dtype=theta.dtype)])


def _error(sampler: Sampler, grid: GridSpec) -> tuple[float, float]:
    """S's largest deviation from the exact ln g over the bins (both mean 0), and its slope."""
    S = sampler.entropy()[:, 0]
    centres, _ = grid.centres()
    exact = (D / 2 - 1) * centres.log()
    deviation = (S - S.mean()) - (exact - exact.mean())
    design = torch.stack([centres.log(), torch.ones_like(centres)], 1)
    slope = torch.linalg.lstsq(design, S[:, None]).solution[0].item()
    return deviation.abs().max().item(), slope


def errors_by_halving(
    seed: int, *, ln_f0: float = 10.0, dt: float = 0.01, final_ln_f: float = 1e-4, max_steps: int = 400_000
) -> list[dict[str, Any]]:
    """One walk under the classic schedule, measured after each halving of ``ln f``.

    Args:
        seed: the sampler's seed.
        ln_f0: ``ln f`` at the start (the protocols': 10).
        dt: the time step.
        final_ln_f: the walk stops once ``ln f`` is halved below this.
        max_steps: the walk stops here if ``ln f`` has not reached `final_ln_f`; a last row then
            says where it stood, with ``finished = False``.

    Returns:
        One row a halving (and one at `max_steps` for a walk that ran out): ``seed``, ``ln_f0``,
        ``dt``, ``halvings``, ``ln_f`` (after it), ``steps`` (entropy steps so far),
        ``max_deviation``, ``slope``, ``finished``.
    """
    grid = GridSpec((1.0, 4.0), (0.0, 1.0), 10, 1)
    config = WLMDConfig(
        grid=grid,
        schedule=Schedule(
            kind="flat",
            ln_f0=ln_f0,
            flatness=0.8,
            check_every=CHECK_EVERY,
            ln_f_min=final_ln_f,
            flat_over="x",
        ),
        sigma=(1.0, 0.0),
        dt=dt,
        gamma=0.2,
        share_every=20,
        seed=seed,
    )
    sampler = Sampler(_energy, config, torch.full((2, D), 1.5 / D**0.5, dtype=torch.float64))
    rows: list[dict[str, Any]] = []
    steps = 0

    def measured() -> dict[str, Any]:
        deviation, slope = _error(sampler, grid)
        return {
            "seed": seed,
            "ln_f0": ln_f0,
            "dt": dt,
            "halvings": sampler.halvings,
            "ln_f": sampler.ln_f,
            "steps": steps,
            "max_deviation": deviation,
            "slope": slope,
            "finished": sampler.ln_f <= final_ln_f,
        }

    while sampler.ln_f > final_ln_f and steps < max_steps:
        before = sampler.halvings
        sampler.run(CHECK_EVERY)  # at most one halving: flatness is checked once a chunk
        steps += CHECK_EVERY
        if sampler.halvings > before:
            rows.append(measured())
    if not rows or not rows[-1]["finished"] and rows[-1]["steps"] < steps:
        rows.append(measured())  # out of steps: where the walk stood
    return rows


def table(frame: pd.DataFrame) -> str:
    """Markdown, one row a halving: ``ln f`` after it, and over the seeds the range of entropy
    steps taken and of S's largest deviation (`frame`: `errors_by_halving`'s rows, any seeds).
    """
    lines = [
        "| halvings | ln f after | entropy steps (seeds' range) | largest deviation of S (seeds' range) |",
        "|---|---|---|---|",
    ]
    for halvings, rows in frame.groupby("halvings"):
        lines.append(
            f"| {halvings} | {rows['ln_f'].iloc[0]:.3g} | {rows['steps'].min():,}-{rows['steps'].max():,} "
            f"| {rows['max_deviation'].min():.2f}-{rows['max_deviation'].max():.2f} |"
        )
    return "\n".join(lines)
