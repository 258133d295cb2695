"""WLMD sampler machinery against known answers.

* E = |theta|^2 in d dimensions has ln g(E) = (d/2 - 1) ln E + const: a 1-D Wang-Landau (the
  2-D grid with a dummy second CV) must recover that slope;
* the sphere constraint holds to 1e-6 after many steps, velocities stay tangent;
* N steps equal N/2 + checkpoint + resume N/2, bit for bit (through a run folder);
* grid indices never wrap: negative and too-large bins raise, out-of-grid states hit the wall.
"""

from __future__ import annotations

import os
import shutil
import signal

import pytest
import torch

from interp.config import to_dict
from interp.wlmd.cvs import ModelCVs, margins
from interp.wlmd.grid import GridSpec, OutOfGrid, Schedule, at, deposit, flatness, interpolate
from interp.wlmd.runs import wlmd_produce, wlmd_run
from interp.wlmd.sampler import WALL_FORCES, Sampler, WLMDConfig, walk_record
from models import build_model, preset_config
from tasks import ModAddTask

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _energy(theta: torch.Tensor) -> torch.Tensor:
    return torch.stack([(theta * theta).sum(), torch.full((), 0.5, dtype=theta.dtype)])


def test_entropy_slope_of_a_gaussian_energy_matches_the_density_of_states():
    d, steps = 6, 4000
    config = WLMDConfig(
        grid=GridSpec((1.0, 4.0), (0.0, 1.0), 10, 1),
        schedule=Schedule(kind="ramp", ln_f_max=0.02, rise=0, plateau=steps // 4, decay_tau=steps // 8),
        sigma=(1.0, 0.0),
        dt=0.1,
        gamma=0.2,
        share_every=20,
        seed=0,
    )
    sampler = Sampler(_energy, config, torch.full((2, d), 1.5 / d**0.5, dtype=torch.float64))
    sampler.run(steps)
    S = sampler.entropy()[:, 0]
    centres, _ = config.grid.centres()
    X = torch.stack([centres.log(), torch.ones_like(centres)], 1)
    slope = torch.linalg.lstsq(X, S[:, None]).solution[0].item()
    # Seeds 0-3 give 1.92-2.06 at this length; 0.25 leaves room for platform rounding.
    assert slope == pytest.approx(d / 2 - 1, abs=0.25)
    assert sampler.walls > 0  # the grid edges were hit and reflected


def test_sphere_constraint_and_tangent_velocities_hold():
    config = WLMDConfig(
        grid=GridSpec((-20.0, 20.0), (0.0, 1.0), 8, 1),
        dt=0.05,
        radius=3.0,
        seed=1,
        schedule=Schedule(ln_f_max=0.05, rise=10, plateau=100),
    )
    cv = lambda t: torch.stack([10 * t[0] * t[1], torch.full((), 0.5, dtype=t.dtype)])  # noqa: E731
    # A seeded start: the global RNG's state depends on which tests ran before in the worker, and
    # an unlucky draw puts a walker outside the grid (|x| = 10 |t0 t1| can exceed 20 at radius 3).
    start = torch.randn(3, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sampler = Sampler(cv, config, start)
    sampler.run(1500)
    norms = sampler.theta.norm(dim=1)
    assert (norms - 3.0).abs().max().item() < 1e-6
    radial = (sampler.v * sampler.theta).sum(1) / 3.0
    assert radial.abs().max().item() < 1e-6


def _tiny():
    task = ModAddTask(p=5, train_frac=0.6)
    model = build_model(preset_config("modadd-1l", task, d_model=8, n_heads=2, d_head=4, d_mlp=16), seed=0)
    splits = task.splits(0)
    run_config = {
        "model": {"kind": model.cfg.kind, **to_dict(model.cfg)},
        "task": task.to_dict(),
        "train": {"data_seed": 0, "loss": "cross_entropy"},
    }
    return model, splits, ModelCVs(model, splits["train"], splits["test"], k=6.0), run_config


RAMP = Schedule(ln_f_max=0.05, rise=4, plateau=4, decay_tau=4)
# The classic schedule, halving at every check (any visited histogram is 0-flat): its halvings
# straddle the resume below.
HALVING = Schedule(kind="flat", ln_f0=0.05, flatness=0.0, check_every=2)


def _model_config(radius: float, schedule: Schedule = RAMP) -> WLMDConfig:
    return WLMDConfig(
        grid=GridSpec((-8.0, 3.0), (0.0, 10.5), 11, 21),
        dt=0.01,
        radius=radius,
        share_every=3,
        seed=2,
        schedule=schedule,
    )


def _stop_at(monkeypatch, step, how):
    """Make every sampler call `how` (a signal, a death) right after it reaches `step`
    (`monkeypatch.undo()` lets it run on).
    """
    advance = Sampler.advance

    def stopping(self):
        advance(self)
        if self.step == step:
            how()

    monkeypatch.setattr(Sampler, "advance", stopping)


def _sigterm():
    os.kill(os.getpid(), signal.SIGTERM)


def _same_state(a: Sampler, b: Sampler):
    a, b = a.state_dict(), b.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key


def test_model_cvs_are_log_loss_and_smooth_accuracy():
    model, splits, cvs, _ = _tiny()
    theta = cvs.flatten()
    x, y = cvs(theta).tolist()
    train_logits, test_logits = model.readout(splits["train"].tokens), model.readout(splits["test"].tokens)
    loss = torch.nn.functional.cross_entropy(train_logits, splits["train"].labels)
    assert x == pytest.approx(loss.log().item(), abs=1e-5)
    m = torch.tensor([[1.0, 3.0, 2.0]]), torch.tensor([1])
    assert margins(*m).item() == pytest.approx(1.0)
    assert y == pytest.approx(
        10 * torch.sigmoid(6 * margins(test_logits, splits["test"].labels)).mean().item(), abs=1e-5
    )


@pytest.mark.parametrize("schedule", [RAMP, HALVING], ids=["ramp", "halving"])
def test_resume_from_a_checkpoint_is_bit_identical(tmp_path, schedule):
    model, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    theta0 = torch.stack([cvs.flatten(), cvs.flatten() * 1.01])
    config = _model_config(radius, schedule)
    straight = wlmd_run(tmp_path / "a", run_config, cvs, theta0, config, 12, checkpoint_every=100)
    wlmd_run(tmp_path / "b", run_config, cvs, theta0, config, 6, checkpoint_every=100)
    resumed = wlmd_run(tmp_path / "b", run_config, cvs, None, config, 12, checkpoint_every=100)
    a, b = straight.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and a["step"] == 12
    if schedule.kind == "flat":
        assert resumed.current_ln_f() == schedule.ln_f0 / 2**6  # halved at steps 2, 4, ..., 12
    for key in a:
        assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key
    assert (straight.theta.norm(dim=1) - radius).abs().max().item() < 1e-6 * radius


def test_a_signal_saves_the_step_reached_and_the_walk_resumes_bit_identically(tmp_path, monkeypatch):
    """SIGTERM at step 5 of 12 (checkpoints every 100): a checkpoint at step 5, TrainingInterrupted
    (the CLI's exit 143), and the same call then ends where a walk never stopped ends.
    """
    from interp.errors import TrainingInterrupted
    from interp.store import list_checkpoints

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    theta0 = torch.stack([cvs.flatten(), cvs.flatten() * 1.01])
    straight = wlmd_run(
        tmp_path / "a", run_config, cvs, theta0, _model_config(radius), 12, checkpoint_every=100
    )
    _stop_at(monkeypatch, 5, _sigterm)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM at step 5") as info:
        wlmd_run(tmp_path / "b", run_config, cvs, theta0, _model_config(radius), 12, checkpoint_every=100)
    assert info.value.signum == signal.SIGTERM and list_checkpoints(tmp_path / "b") == [0, 5]
    assert info.value.resume == "run the same command to continue"  # not interp train --resume
    monkeypatch.undo()
    resumed = wlmd_run(tmp_path / "b", run_config, cvs, None, _model_config(radius), 12, checkpoint_every=100)
    _same_state(resumed, straight)


def test_production_snapshots_open_as_ordinary_checkpoints(tmp_path):
    from analyses import load_subject

    _, _, cvs, run_config = _tiny()
    sampler = Sampler(cvs, _model_config(cvs.flatten().norm().item()), cvs.flatten()[None])
    saved = wlmd_produce(
        tmp_path / "samples", run_config, cvs, sampler, 5, (-8.0, 3.0, 0.0, 10.5), max_samples=3
    )
    assert len(saved) == 3
    subject = load_subject(saved[-1])
    assert subject.step == 2 and set(subject.splits) == {"train", "test"}
    assert torch.equal(sampler.S, torch.zeros_like(sampler.S))  # frozen: S untouched


def test_indices_never_wrap():
    spec = GridSpec((0.0, 1.0), (0.0, 2.0), 4, 2)
    S = torch.arange(8.0).reshape(4, 2)
    assert spec.index(0.0, 0.0) == (0, 0) and spec.index(0.999, 1.999) == (3, 1)
    for point in [(-0.01, 0.5), (1.0, 0.5), (0.5, -1e-9), (0.5, 2.0), (float("nan"), 0.5)]:
        with pytest.raises(OutOfGrid):
            spec.index(*point)
    for i, j in [(-1, 0), (0, -1), (4, 0), (0, 2)]:
        with pytest.raises(OutOfGrid):
            at(S, spec, i, j)
        with pytest.raises(OutOfGrid):
            deposit(S.clone(), spec, i, j, 1.0, (1.0, 1.0))
    assert at(S, spec, 3, 1).item() == 7.0


def test_kernel_mirrors_at_the_edge_and_conserves_mass():
    spec = GridSpec((0.0, 1.0), (0.0, 1.0), 10, 1)
    S = torch.zeros(10, 1, dtype=torch.float64)
    deposit(S, spec, 0, 0, 2.0, (1.5, 0.0))
    assert S.sum().item() == pytest.approx(2.0)
    assert S[-3:].sum().item() == 0.0  # nothing wrapped to the far edge
    assert S[0, 0] > S[1, 0] > S[2, 0]


def test_interpolation_is_bilinear_between_centres():
    spec = GridSpec((0.0, 2.0), (0.0, 1.0), 2, 1)
    S = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    cv = torch.tensor([1.0, 0.5], dtype=torch.float64, requires_grad=True)  # halfway between centres 0.5, 1.5
    value = interpolate(S, spec, cv)
    (grad,) = torch.autograd.grad(value, cv)
    assert value.item() == pytest.approx(2.0) and grad[0].item() == pytest.approx(2.0)
    assert interpolate(S, spec, torch.tensor([0.1, 0.5])).item() == pytest.approx(
        1.0
    )  # flat beyond the centres


@pytest.mark.parametrize("edges", ["flat", "linear"])
def test_the_outer_half_bins_are_flat_or_carry_the_outermost_slope(edges):
    """Between an outermost centre and the edge S is constant (flat) or continues the slope
    between the two outermost centres (linear), on both axes; inside, both are bilinear.
    """
    spec = GridSpec((0.0, 3.0), (0.0, 2.0), 3, 2, edges=edges)  # centres x 0.5, 1.5, 2.5; y 0.5, 1.5
    S = torch.tensor([[1.0, 1.0], [3.0, 3.0], [4.0, 6.0]], dtype=torch.float64)

    def value_and_grad(x, y):
        cv = torch.tensor([x, y], dtype=torch.float64, requires_grad=True)
        value = interpolate(S, spec, cv)
        return value.item(), *torch.autograd.grad(value, cv)[0].tolist()  # S, dS/dx, dS/dy

    linear = edges == "linear"
    # Between centres both are bilinear: (S, dS/dx, dS/dy) at x = 2.0, y on its lower centre.
    assert value_and_grad(2.0, 0.5) == pytest.approx((3.5, 1.0, 1.0))
    # x = 0.2, below the lowest centre: 1 - 2 * 0.3 with the slope 2 carried on, or 1 and no force
    assert value_and_grad(0.2, 0.5) == pytest.approx((0.4, 2.0, 0.0) if linear else (1.0, 0.0, 0.0))
    # x = 2.9, above the top centre, on the lower and the upper y centre (x slopes 1 and 3)
    assert value_and_grad(2.9, 0.5) == pytest.approx((4.4, 1.0, 2.8) if linear else (4.0, 0.0, 2.0))
    assert value_and_grad(2.9, 1.5) == pytest.approx((7.2, 3.0, 2.8) if linear else (6.0, 0.0, 2.0))
    # y = 1.9, above the top y centre, on the top x centre: the y slope 2 carried on, or none
    assert value_and_grad(2.5, 1.9) == pytest.approx((6.8, 3.8, 2.0) if linear else (6.0, 3.0, 0.0))


def test_the_bias_force_in_an_outer_half_bin_is_the_outermost_slope_with_linear_edges():
    """The sampler's force at a point beyond the top x centre, against -kT * slope * grad x
    computed by hand for a linear CV: zero with flat edges (what protocol 2's walks ran), the
    outermost slope with linear ones.
    """
    a = torch.tensor([0.6, 0.8, 0.0], dtype=torch.float64)  # x(theta) = a . theta, grad x = a
    cv = lambda t: torch.stack([a @ t, torch.full((), 0.5, dtype=t.dtype)])  # noqa: E731
    S = torch.tensor([[0.0], [1.0], [3.0], [6.0]], dtype=torch.float64)  # centres 0.5 ... 3.5
    inside, outer = 3.2 * a, 3.8 * a  # x = 3.2 (between centres 2.5, 3.5) and 3.8 (beyond 3.5)
    for edges, expected_outer in (("flat", 0.0), ("linear", -3.0)):
        config = WLMDConfig(grid=GridSpec((0.0, 4.0), (0.0, 1.0), 4, 1, edges=edges), kT=2.0)
        sampler = Sampler(cv, config, inside[None])
        for theta, slope in ((inside, -3.0), (outer, expected_outer)):
            _, force = sampler._cv_force(theta, S)
            assert torch.allclose(force, 2.0 * slope * a), (edges, theta)


def test_grid_edges_are_written_only_when_not_flat_and_checked():
    """A flat grid writes the config every walk before the field wrote (so those walks resume);
    linear edges round-trip; another value is refused naming the valid ones.
    """
    from interp.config import from_dict
    from interp.errors import ConfigError

    flat = GridSpec((0.0, 1.0), (0.0, 1.0), 2, 1)
    assert "edges" not in to_dict(flat) and from_dict(GridSpec, to_dict(flat)) == flat
    linear = GridSpec((0.0, 1.0), (0.0, 1.0), 2, 1, edges="linear")
    assert to_dict(linear)["edges"] == "linear" and from_dict(GridSpec, to_dict(linear)) == linear
    with pytest.raises(ConfigError, match="valid: flat, linear"):
        GridSpec((0.0, 1.0), (0.0, 1.0), 2, 1, edges="mirror")


def test_flatness_counts_the_visited_bins_or_every_x_bin():
    """Min / mean by hand: over the non-zero bins, or over the x-bins summed over y."""
    H = torch.tensor([[2.0, 0.0], [0.0, 0.0], [4.0, 2.0]], dtype=torch.float64)
    assert flatness(H) == pytest.approx(2 / (8 / 3))  # visited: 2, 4, 2
    assert flatness(H, "x") == 0.0  # x-bin 1 has no visit
    H[1, 1] = 3.0  # x sums 2, 3, 6
    assert flatness(H, "x") == pytest.approx(2 / (11 / 3))
    assert flatness(torch.zeros(2, 2)) == flatness(torch.zeros(2, 2), "x") == 0.0
    from interp.errors import ConfigError

    with pytest.raises(ConfigError, match="valid: visited, x"):
        flatness(H, "y")


@pytest.mark.parametrize("flat_over", ["visited", "x"])
def test_the_classic_schedule_halves_on_one_visited_bin_unless_every_x_bin_must_be_visited(flat_over):
    """A walker held in one x-bin (its CV does not depend on theta): the visited count calls one
    bin flat and halves ln f at every check (as study B's wall diagnostic saw); counting every
    x-bin keeps ln f at its start until the walk has covered x, and the record says so too.
    """
    cv = lambda t: torch.stack([0.5 + 0 * t.sum(), torch.full((), 0.5, dtype=t.dtype)])  # noqa: E731
    schedule = Schedule(kind="flat", ln_f0=1.0, check_every=10, flat_over=flat_over)
    config = WLMDConfig(grid=GridSpec((0.0, 2.0), (0.0, 1.0), 2, 1), schedule=schedule, dt=0.01)
    sampler = Sampler(cv, config, torch.ones(1, 3, dtype=torch.float64))
    sampler.run(35)  # checks at 10, 20, 30 (each halving resets the histogram), 5 visits since
    record = walk_record(sampler, torch.ones(3, dtype=torch.float64))
    if flat_over == "visited":
        assert (sampler.halvings, sampler.current_ln_f(), record["flatness"]) == (3, 0.125, 1.0)
    else:
        assert (sampler.halvings, sampler.current_ln_f(), record["flatness"]) == (0, 1.0, 0.0)
    assert sampler.S[0, 0, 0] > sampler.S[0, 1, 0]  # every deposit went to the one bin


def test_schedule_flat_over_is_written_only_when_not_visited_and_checked():
    """Every walk before the field counted visited bins and resumes with its config unchanged."""
    from interp.config import from_dict
    from interp.errors import ConfigError

    assert "flat_over" not in to_dict(Schedule())
    x = Schedule(kind="flat", flat_over="x")
    assert to_dict(x)["flat_over"] == "x" and from_dict(Schedule, to_dict(x)) == x
    with pytest.raises(ConfigError, match="valid: visited, x"):
        Schedule(flat_over="all")


def _walker_at_the_top_wall(wall_force: str, seed: int) -> Sampler:
    """One walker of x = |theta|^2 in 400 dimensions at x = 3.999, 0.001 below the grid's top.

    A thermal drift raises x by dt^2 |u|^2 ~ dt^2 * d * kT = 1 on top of its first-order part
    2 dt theta . u ~ 0.2 N(0, 1), so every drift leaves the grid (what protocol 4's seed 2 met
    at the upper ln-loss wall). The start's force is 0 (S is 0 everywhere).
    """
    d = 400
    config = WLMDConfig(
        grid=GridSpec((0.5, 4.0), (0.0, 1.0), 7, 1, edges="linear"),
        schedule=Schedule(kind="flat", ln_f0=1.0),
        sigma=(1.0, 0.0),
        dt=0.05,
        seed=seed,
        wall_force=wall_force,
    )
    return Sampler(_energy, config, torch.full((1, d), (3.999 / d) ** 0.5, dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_walker_every_drift_takes_off_the_grid_leaves_the_wall_only_under_a_fresh_force(seed):
    """Under the kept force the walker never moves, however much S grows in its bin; under the
    fresh one the deposits' slope pushes it back into the grid (seeds 0-5 move by step 130).
    """
    kept = _walker_at_the_top_wall("kept", seed)
    kept.run(400)
    assert kept.walls == 400 and kept.cv[0, 0].item() == pytest.approx(3.999, abs=1e-12)
    assert kept.force.abs().max().item() == 0.0  # the start's force, never recomputed
    assert kept.S[0, -1, 0] > kept.S[0, -2, 0] + 50  # the deposits' slope it never feels

    fresh = _walker_at_the_top_wall("fresh", seed)
    lowest = min(fresh.advance() or fresh.cv[0, 0].item() for _ in range(400))
    assert fresh.walls < 200 and lowest < 3.0  # two bins below the top one


def test_a_reflected_walkers_fresh_force_is_the_current_outermost_slope():
    """After reflections at the top wall (x beyond the top centre 3.75, linear edges), the fresh
    force is -kT * (S[6] - S[5]) / 0.5 * grad x with grad x = 2 theta, by hand, under the S of
    that moment; the kept one is the start's, 0.
    """
    for wall_force in WALL_FORCES:
        sampler = _walker_at_the_top_wall(wall_force, 0)
        for _ in range(30):
            S_before = sampler.S[0, :, 0].clone()  # the S the step's wall force is computed under
            sampler.advance()
        assert sampler.walls == 30 and sampler.cv[0, 0].item() == pytest.approx(3.999, abs=1e-12)
        slope = (S_before[-1] - S_before[-2]) / 0.5
        expected = (
            -slope * 2 * sampler.theta[0] if wall_force == "fresh" else torch.zeros_like(sampler.theta[0])
        )
        torch.testing.assert_close(sampler.force[0], expected, rtol=1e-12, atol=1e-12)
        assert (slope > 0) and (wall_force == "kept" or sampler.force[0].abs().max() > 0)


def test_a_walk_without_the_wall_force_kept_it_and_a_new_walk_recomputes_it():
    """A config written before the field (every walk of protocols 1-5) reads as the kept force
    and is written back unchanged; a new walk gets the fresh force, recorded; others are refused.
    """
    from interp.config import from_dict
    from interp.errors import ConfigError

    grid = GridSpec((0.0, 1.0), (0.0, 1.0), 2, 1)
    fresh, kept = WLMDConfig(grid=grid), WLMDConfig(grid=grid, wall_force="kept")
    assert fresh.wall_force == "fresh" and to_dict(fresh)["wall_force"] == "fresh"
    assert "wall_force" not in to_dict(kept)  # as every walk before the field was written
    old = {k: v for k, v in to_dict(fresh).items() if k != "wall_force"}
    assert from_dict(WLMDConfig, old) == kept
    assert from_dict(WLMDConfig, to_dict(fresh)) == fresh
    with pytest.raises(ConfigError, match=r"wall_force = 'new' is not valid \(valid: fresh, kept\)"):
        WLMDConfig(grid=grid, wall_force="new")


def test_walkers_start_inside_the_grid():
    config = WLMDConfig(grid=GridSpec((1.0, 4.0), (0.0, 1.0), 4, 1))
    with pytest.raises(OutOfGrid, match="walker 0"):
        Sampler(_energy, config, torch.zeros(1, 3, dtype=torch.float64))


def _hooked_cvs(model, train, heldout, unflatten, k: float = 6.0):
    """Oracle CVs: the hooked forward `model(tokens)[:, -1]`, the runner-up logit by `topk`."""

    def cv(theta: torch.Tensor) -> torch.Tensor:
        params = unflatten(theta)
        logits = torch.func.functional_call(model, params, (train.tokens,))[:, -1]
        x = torch.nn.functional.cross_entropy(logits, train.labels).log()
        held = torch.func.functional_call(model, params, (heldout.tokens,))[:, -1]
        top2 = held.topk(2, dim=1)
        correct = held.gather(1, heldout.labels[:, None])[:, 0]
        other = torch.where(top2.indices[:, 0] == heldout.labels, top2.values[:, 1], top2.values[:, 0])
        return torch.stack([x, 10 * torch.sigmoid(k * (correct - other)).mean()])

    return cv


def test_a_wlmd_step_on_the_fast_forward_equals_the_hooked_forward():
    # Oracle: the same walk driven by CVs from the hooked forward. CVs, forces (-grad S through
    # the model) and positions agree to 1e-5 after steps whose deposits make S non-flat, and
    # the CVs under test run no module of the hooked path (the embedding hook never fires).
    task = ModAddTask(p=7, train_frac=0.6)
    model = build_model(preset_config("modadd-1l", task, d_model=16, n_heads=2, d_head=8, d_mlp=32), seed=0)
    with torch.no_grad():  # non-zero biases, so every term of the fast path is exercised
        gen = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    splits = task.splits(0)
    fast = ModelCVs(model, splits["train"], splits["test"])
    hooked = _hooked_cvs(model, splits["train"], splits["test"], fast.unflatten)
    theta = fast.flatten()
    calls = []
    handle = model.hook_embed.register_forward_hook(lambda *_: calls.append(1))
    try:
        with torch.enable_grad():
            t = theta.clone().requires_grad_(True)
            cv_fast = fast(t)
            g_fast = torch.autograd.grad(cv_fast[0] + 3 * cv_fast[1], t)[0]
        assert calls == []
        with torch.enable_grad():
            t = theta.clone().requires_grad_(True)
            cv_hooked = hooked(t)
            g_hooked = torch.autograd.grad(cv_hooked[0] + 3 * cv_hooked[1], t)[0]
        assert calls
    finally:
        handle.remove()
    torch.testing.assert_close(cv_fast, cv_hooked, atol=1e-5, rtol=0)
    torch.testing.assert_close(g_fast, g_hooked, atol=1e-5 * g_hooked.abs().max().item(), rtol=0)

    x0, y0 = cv_hooked.tolist()
    config = WLMDConfig(
        grid=GridSpec((x0 - 3, x0 + 3), (-0.1, 10.2), 6, 5),
        dt=1e-3,
        radius=float(theta.norm()),
        seed=3,
        schedule=Schedule(ln_f_max=0.5, rise=1, plateau=100),
    )
    walks = [Sampler(cv, config, theta[None].clone()) for cv in (fast, hooked)]
    for walk in walks:
        walk.run(6)
    a, b = walks[0].state_dict(), walks[1].state_dict()
    assert a["force"].abs().max() > 0  # S is no longer flat where the walker is
    for key in ("cv", "force", "theta", "v", "S"):
        scale = max(b[key].abs().max().item(), 1.0)
        torch.testing.assert_close(a[key].double(), b[key].double(), atol=1e-5 * scale, rtol=0, msg=key)


def _produce(folder, cvs, run_config, radius, steps=12, walk=3, **kwargs):
    """A two-walker production of `steps` steps after `walk` walk steps from the same start every
    time, looking every 2 sampler steps over the whole grid: with the defaults a sample of each
    walker at sampler steps 4, 6, ..., 14 (production steps 1, 3, ..., 11).
    """
    sampler = Sampler(cvs, _model_config(radius), torch.stack([cvs.flatten(), cvs.flatten() * 1.01]))
    sampler.run(walk)
    window = (-8.0, 3.0, 0.0, 10.5)
    return sampler, wlmd_produce(folder, run_config, cvs, sampler, steps, window, every=2, **kwargs)


def _same_samples(a, b):
    from interp.store.checkpoint import load_checkpoint
    from interp.store.run_folder import read_metrics

    assert [p.name for p in a] == [p.name for p in b] and a
    for x, y in zip(a, b, strict=True):
        x, y = load_checkpoint(x, load_train_state=False), load_checkpoint(y, load_train_state=False)
        assert x.meta == y.meta and x.state_dict.keys() == y.state_dict.keys()
        assert all(torch.equal(x.state_dict[k], y.state_dict[k]) for k in x.state_dict)
    assert read_metrics(a[0].parent.parent) == read_metrics(b[0].parent.parent)


def test_a_signal_stops_production_at_the_step_reached_and_it_resumes_to_the_same_samples(
    tmp_path, monkeypatch
):
    """SIGTERM at production step 5 of 12 (sampler step 8; resume points every 100): the resume
    point is saved at step 5 beside the one before it, TrainingInterrupted names it, and the same
    call finishes with the samples, log and sampler state of a production never stopped; the
    resume points are gone once DONE is written.
    """
    from interp.errors import TrainingInterrupted
    from interp.store import is_done, list_checkpoints
    from interp.wlmd.runs import PROGRESS_DIR

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    straight, expected = _produce(tmp_path / "a", cvs, run_config, radius, checkpoint_every=100)
    assert len(expected) == 12  # 2 walkers x 6 even steps
    _stop_at(monkeypatch, 8, _sigterm)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGTERM at production step 5") as info:
        _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=100)
    assert info.value.resume == "run the same command to continue"
    assert list_checkpoints(tmp_path / "b" / PROGRESS_DIR) == [0, 5]
    assert list_checkpoints(tmp_path / "b") == [0, 1, 2, 3, 4, 5] and not is_done(tmp_path / "b")
    monkeypatch.undo()
    resumed, saved = _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=100)
    _same_samples(saved, expected)
    _same_state(resumed, straight)
    assert is_done(tmp_path / "b") and not (tmp_path / "b" / PROGRESS_DIR).exists()
    shutil.copytree(tmp_path / "a", tmp_path / "b" / PROGRESS_DIR)  # as a kill right after DONE leaves it
    _, again = _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=100)
    assert again == saved and not (tmp_path / "b" / PROGRESS_DIR).exists()  # read back, not sampled again


def test_a_stop_right_after_a_resume_point_does_not_save_it_again(tmp_path, monkeypatch):
    """A signal in the step that saved a resume point: saving it again would replace the newest
    resume point, and a kill in the middle of that would leave a production that cannot resume.
    """
    from interp.errors import TrainingInterrupted
    from interp.wlmd import runs as runs_module

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    straight, expected = _produce(tmp_path / "a", cvs, run_config, radius, checkpoint_every=4)
    save, saved_at = runs_module._save_progress, []

    def counted(progress, sampler, cvs, start, samples):
        saved_at.append(sampler.step - start)
        save(progress, sampler, cvs, start, samples)

    monkeypatch.setattr(runs_module, "_save_progress", counted)
    _stop_at(monkeypatch, 3 + 4, _sigterm)  # production step 4: a resume point
    with pytest.raises(TrainingInterrupted, match="production step 4"):
        _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=4)
    assert saved_at == [0, 4]
    monkeypatch.undo()
    resumed, saved = _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=4)
    _same_samples(saved, expected)
    _same_state(resumed, straight)


def test_samples_a_killed_production_saved_after_its_resume_point_are_saved_again(tmp_path, monkeypatch):
    """A process dying at sampler step 10 (no signal: nothing is saved then) with resume points
    every 4 production steps: the samples of step 8 lie past the resume point of sampler step 7.
    Resuming drops them (a second death at step 8 finds only the samples of steps 4 and 6, LATEST
    naming the last) and saves them again: the folder ends as a production never stopped.
    """
    from interp.store import list_checkpoints, read_metrics
    from interp.store.layout import read_latest

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    straight, expected = _produce(tmp_path / "a", cvs, run_config, radius, checkpoint_every=4)

    def die():
        raise RuntimeError("killed")

    for step, samples in [(10, 6), (8, 4)]:
        _stop_at(monkeypatch, step, die)
        with pytest.raises(RuntimeError, match="killed"):
            _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=4)
        assert list_checkpoints(tmp_path / "b") == list(range(samples))
        assert [r["step"] for r in read_metrics(tmp_path / "b")] == list(range(samples))
        assert read_latest(tmp_path / "b" / "checkpoints") == f"step_{samples - 1:06d}"
        monkeypatch.undo()
    resumed, saved = _produce(tmp_path / "b", cvs, run_config, radius, checkpoint_every=4)
    _same_samples(saved, expected)
    _same_state(resumed, straight)


def test_a_production_of_another_walk_end_is_refused(tmp_path, monkeypatch):
    """A production stopped after a 3-step walk does not resume behind a walk that went on to 5."""
    from interp.errors import CheckpointError, TrainingInterrupted

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    _stop_at(monkeypatch, 6, _sigterm)
    with pytest.raises(TrainingInterrupted):
        _produce(tmp_path / "a", cvs, run_config, radius)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="started from step 3 of its walk, which now ends at step 5"):
        _produce(tmp_path / "a", cvs, run_config, radius, walk=5)


def test_samples_without_a_resume_point_are_refused(tmp_path):
    """A partial production an older interp wrote (samples, no resume point) cannot continue."""
    from interp.errors import CheckpointError

    _, _, cvs, run_config = _tiny()
    radius = cvs.flatten().norm().item()
    _produce(tmp_path / "a", cvs, run_config, radius)
    (tmp_path / "a" / "DONE").unlink()  # as a kill before the end left it, before resume points
    with pytest.raises(CheckpointError, match="holds samples but no resume point"):
        _produce(tmp_path / "a", cvs, run_config, radius)
