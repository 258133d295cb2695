"""The WLMD sampler under the classic Wang-Landau schedule against a known density of states.

The ramp schedule's oracle (`tests/oracle/test_wlmd.py`) walks ``E = |theta|^2`` in ``d = 6``
dimensions, whose density of states is ``ln g(E) = (d/2 - 1) ln E + const``. This is the same
toy under the schedule study B's protocols 3-6 walked with (``Schedule(kind="flat")``: ``ln f``
halved each time the histogram is 80% flat over every x-bin), run until ``ln f`` is at most
1e-4. The entropy estimate S, shifted to mean 0 over the bins, must match the exact ``ln g`` at
the bin centres within 0.4 everywhere, and its least-squares slope against ``ln E`` must be
``d/2 - 1 = 2`` within 0.25 (the ramp test's tolerance).

Measured on seeds 0-3 (ln f from 0.1, 10 halvings, 6,700-11,600 steps): slope 1.96-2.15,
largest deviation 0.15-0.25. From ln f 1 or 10 the toy's S grows slopes that the time step 0.1
cannot follow in some seeds (the walk diverges), so the test starts at 0.1. The error after each
halving from the protocols' own start (ln f 10, at a time step of 0.01) is a measurement, not
asserted here: `analyses/studies/study_b/diagnostics/classic_toy.py`, reported on
docs/study_b_history.md.
"""

from __future__ import annotations

import pytest
import torch

from interp.wlmd.grid import GridSpec, Schedule
from interp.wlmd.sampler import Sampler, WLMDConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

D = 6
FINAL_LN_F = 1e-4


def _energy(theta: torch.Tensor) -> torch.Tensor:
    return torch.stack([(theta * theta).sum(), torch.full((), 0.5, dtype=theta.dtype)])


def test_the_classic_schedule_run_to_a_small_ln_f_recovers_the_density_of_states():
    config = WLMDConfig(
        grid=GridSpec((1.0, 4.0), (0.0, 1.0), 10, 1),
        schedule=Schedule(
            kind="flat", ln_f0=0.1, flatness=0.8, check_every=100, ln_f_min=FINAL_LN_F, flat_over="x"
        ),
        sigma=(1.0, 0.0),
        dt=0.1,
        gamma=0.2,
        share_every=20,
        seed=2,
    )
    sampler = Sampler(_energy, config, torch.full((2, D), 1.5 / D**0.5, dtype=torch.float64))
    steps = 0
    while sampler.ln_f > FINAL_LN_F:  # halved below 1e-4 after its tenth halving
        sampler.run(config.schedule.check_every)
        steps += config.schedule.check_every
        assert steps <= 40_000, f"ln f {sampler.ln_f} after {steps} steps: the histogram never became flat"
    assert sampler.halvings == 10 and sampler.current_ln_f() == 0.0  # stopped depositing

    S = sampler.entropy()[:, 0]
    centres, _ = config.grid.centres()
    exact = (D / 2 - 1) * centres.log()
    deviation = (S - S.mean()) - (exact - exact.mean())
    assert deviation.abs().max().item() < 0.4, deviation
    X = torch.stack([centres.log(), torch.ones_like(centres)], 1)
    slope = torch.linalg.lstsq(X, S[:, None]).solution[0].item()
    assert slope == pytest.approx(D / 2 - 1, abs=0.25)
    assert sampler.walls > 0  # the grid's edges were hit and reflected
