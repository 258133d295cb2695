"""The WLMD sampler's vectorised engine against its loop (the oracle), in float64.

The loop moves the walkers one after the other, each with its own forward and backward; the
vectorised engine computes every walker's CVs in one vmap forward and every force in one
backward. Both draw the same noise in the same order, so in float64 their CVs, forces and whole
trajectories (positions, velocities, S, histograms, wall reflections) agree to rounding. A
vectorised walk resumes bit-identically from its checkpoint, and a walk refuses to resume with
the other engine.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from interp.config import to_dict
from interp.errors import ConfigError
from interp.wlmd.cvs import ModelCVs
from interp.wlmd.grid import GridSpec, Schedule
from interp.wlmd.runs import wlmd_run
from interp.wlmd.sampler import Sampler, WLMDConfig
from models import build_model, preset_config
from tasks import ModAddTask

TOL = 1e-10  # of each quantity's scale; float64 rounding of a reordered sum is ~1e-15


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model_cvs():
    task = ModAddTask(p=5, train_frac=0.6)
    model = build_model(preset_config("modadd-1l", task, d_model=8, n_heads=2, d_head=4, d_mlp=16), seed=0)
    model = model.double()
    splits = task.splits(0)
    run_config = {
        "model": {"kind": model.cfg.kind, **to_dict(model.cfg)},
        "task": task.to_dict(),
        "train": {"data_seed": 0, "loss": "cross_entropy"},
    }
    return ModelCVs(model, splits["train"], splits["test"], k=6.0), run_config


def _walkers(cvs: ModelCVs, n: int = 3) -> torch.Tensor:
    theta = cvs.flatten()
    gen = torch.Generator().manual_seed(5)
    return torch.stack(
        [theta + 0.05 * w * torch.randn(theta.shape, generator=gen, dtype=theta.dtype) for w in range(n)]
    )


def _model_config(cvs: ModelCVs, theta0: torch.Tensor, engine: str) -> WLMDConfig:
    x0, y0 = cvs(theta0[0]).tolist()
    return WLMDConfig(
        grid=GridSpec((x0 - 3, x0 + 3), (-0.1, 10.2), 6, 5),
        dt=1e-2,
        radius=float(theta0[0].norm()),
        share_every=2,
        seed=4,
        schedule=Schedule(ln_f_max=0.5, rise=1, plateau=100),
        engine=engine,
    )


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    scale = max(b.abs().max().item(), 1e-300)
    torch.testing.assert_close(a, b, atol=TOL * scale, rtol=0, msg=what)


def test_cvs_and_forces_of_every_walker_equal_the_loops():
    cvs, _ = _model_cvs()
    theta0 = _walkers(cvs)
    sampler = Sampler(cvs, _model_config(cvs, theta0, "vectorized"), theta0)
    gen = torch.Generator().manual_seed(0)
    sampler.S = torch.rand(sampler.S.shape, generator=gen, dtype=torch.float64) * 5  # non-flat, per walker
    cv, force, inside = sampler._cv_force_all(sampler.theta)
    assert inside == [True, True, True]
    for w in range(3):
        cv_w, force_w = sampler._cv_force(sampler.theta[w], sampler.S[w])
        _close(cv[w], cv_w, f"cv of walker {w}")
        assert force_w.abs().max() > 0
        _close(force[w], force_w, f"force of walker {w}")
    assert not torch.allclose(force[0], force[1])  # each walker its own S and position


def test_steps_of_a_model_walk_equal_the_loops():
    cvs, _ = _model_cvs()
    theta0 = _walkers(cvs)
    loop = Sampler(cvs, _model_config(cvs, theta0, "loop"), theta0)
    vec = Sampler(cvs, _model_config(cvs, theta0, "vectorized"), theta0)
    for step in range(5):
        loop.advance()
        vec.advance()
        a, b = vec.state_dict(), loop.state_dict()
        for key in ("theta", "v", "force", "cv", "S"):
            _close(a[key], b[key], f"{key} after step {step + 1}")
        assert torch.equal(a["H"], b["H"]) and a["walls"] == b["walls"]
        assert torch.equal(a["rng"], b["rng"])  # the same draws
    assert loop.force.abs().max() > 0 and loop.S.abs().max() > 0


def _product_cv(t: torch.Tensor) -> torch.Tensor:
    return torch.stack([10 * t[0] * t[1], torch.full((), 0.5, dtype=t.dtype)])


@pytest.mark.parametrize("wall_force", ["kept", "fresh"])
def test_wall_reflections_equal_the_loops(wall_force):
    # A narrow grid and large steps: walkers leave it often and are reflected.
    config = WLMDConfig(
        wall_force=wall_force,
        grid=GridSpec((-3.0, 3.0), (0.0, 1.0), 6, 1),
        dt=0.3,
        radius=2.0,
        share_every=3,
        seed=1,
        schedule=Schedule(ln_f_max=0.3, rise=1, plateau=100),
    )
    theta0 = torch.tensor(
        [[0.1, 0.2, 1.0, 0.5], [0.3, -0.1, 0.2, 1.0], [-0.2, 0.1, 0.7, 0.3]], dtype=torch.float64
    )
    loop = Sampler(_product_cv, config, theta0)
    vec = Sampler(_product_cv, dataclasses.replace(config, engine="vectorized"), theta0)
    for step in range(40):
        loop.advance()
        vec.advance()
        a, b = vec.state_dict(), loop.state_dict()
        assert a["walls"] == b["walls"], step
        for key in ("theta", "v", "force", "cv", "S"):
            _close(a[key], b[key], f"{key} after step {step + 1}")
    assert loop.walls > 3


def test_a_start_outside_the_grid_names_the_walker():
    from interp.wlmd.grid import OutOfGrid

    config = WLMDConfig(grid=GridSpec((-1.0, 1.0), (0.0, 1.0), 4, 1), engine="vectorized")
    theta0 = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)  # 10 * 1 * 1 is outside
    with pytest.raises(OutOfGrid, match="walker 1"):
        Sampler(_product_cv, config, theta0)


def test_resume_of_a_vectorised_walk_is_bit_identical(tmp_path):
    cvs, run_config = _model_cvs()
    theta0 = _walkers(cvs, 2)
    config = _model_config(cvs, theta0, "vectorized")
    straight = wlmd_run(tmp_path / "a", run_config, cvs, theta0, config, 8, checkpoint_every=100)
    wlmd_run(tmp_path / "b", run_config, cvs, theta0, config, 4, checkpoint_every=100)
    resumed = wlmd_run(tmp_path / "b", run_config, cvs, None, config, 8, checkpoint_every=100)
    a, b = straight.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and a["step"] == 8
    for key in a:
        assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())["wlmd"]
    assert recorded["engine"] == "vectorized"


def test_a_walk_refuses_the_other_engine_and_a_loop_walk_records_none(tmp_path):
    cvs, run_config = _model_cvs()
    theta0 = _walkers(cvs, 1)
    loop = _model_config(cvs, theta0, "loop")
    wlmd_run(tmp_path / "loop", run_config, cvs, theta0, loop, 2)
    # A loop walk's config is written as before the field existed, so older folders resume.
    assert "engine" not in json.loads((tmp_path / "loop" / "config.json").read_text())["wlmd"]
    vec = dataclasses.replace(loop, engine="vectorized")
    with pytest.raises(ConfigError, match="walked by the loop engine, not the vectorized one"):
        wlmd_run(tmp_path / "loop", run_config, cvs, None, vec, 4)
    wlmd_run(tmp_path / "vec", run_config, cvs, theta0, vec, 2)
    with pytest.raises(ConfigError, match="walked by the vectorized engine, not the loop one"):
        wlmd_run(tmp_path / "vec", run_config, cvs, None, loop, 4)


def test_an_unknown_engine_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError, match="WLMDConfig.engine = 'vmap'"):
        WLMDConfig(grid=GridSpec((0.0, 1.0), (0.0, 1.0), 2, 1), engine="vmap")
