"""Study B's wall diagnostic (`analyses.studies.study_b.diagnostics.wall`) on a toy protocol-2 walk."""

from __future__ import annotations

import hashlib
import shutil

import pytest
import torch

from analyses.studies.study_b.diagnostics.pilots import PROTOCOL_2, VARIANTS, run_pilots
from analyses.studies.study_b.diagnostics.wall import continue_walk, wall_force
from analyses.studies.study_b.settings import settings_with
from interp.errors import ConfigError
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.checkpoint import load_checkpoint
from interp.wlmd.sampler import Sampler
from tests.builders import STUDY_B_TOY as TOY

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _digest(folder):
    return {
        p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """Protocol 2's walk at toy scale, 40 steps, a checkpoint every 4 (its records' chunks)."""
    out = tmp_path_factory.mktemp("pilots")
    run_pilots(out, steps=40, variants=(VARIANTS[0],), settings=settings_with(TOY, PROTOCOL_2))
    return out / VARIANTS[0].name / "entropy"


def test_a_flat_continuation_of_the_walks_own_schedule_retraces_the_walk(walk, tmp_path):
    """Cut back to its step-20 checkpoint, continued 20 steps with the edges and schedule it ran
    with, the walk reaches exactly the state its own step-40 checkpoint holds; the folder it
    reads is never written.
    """
    steps = list_checkpoints(walk)
    assert 20 in steps and steps[-1] == 40
    cut = tmp_path / "entropy"
    shutil.copytree(walk, cut)
    for step in steps:
        if step > 20:
            shutil.rmtree(checkpoint_dir(cut, step))
    (cut / "checkpoints" / "LATEST").write_text(checkpoint_dir(cut, 20).name + "\n")
    before = _digest(cut)

    run = continue_walk(cut, 20, edges="flat", schedule="walk", log_every=10)

    assert _digest(cut) == before
    assert (run["from_step"], [r["step"] for r in run["log"]]) == (20, [30, 40])
    state = load_checkpoint(walk).train_state["wlmd"]
    assert torch.equal(torch.tensor(run["S"], dtype=torch.float64), state["S"][0])
    assert run["log"][-1]["x"] == state["cv"][0, 0].item()
    assert run["walls"] == state["walls"] - load_checkpoint(cut).train_state["wlmd"]["walls"]
    assert 1 <= run["bins"] <= 4 * 7 and run["x_range"][0] <= run["log"][-1]["x"] <= run["x_range"][1]


def _recorded_forces(monkeypatch):
    """Walker 0's force after every `Sampler.advance` (the continuation's sampler is internal)."""
    forces = []
    advance = Sampler.advance

    def recording(self):
        advance(self)
        forces.append(self.force[0].clone())

    monkeypatch.setattr(Sampler, "advance", recording)
    return forces


def test_a_fresh_wall_force_continues_with_the_same_steps_until_the_first_reflection(walk, monkeypatch):
    """The wall force enters only at a reflection: both continuations agree on every record
    up to the first one, each says which force it ran, and at the reflection the kept force is
    the one carried in while the fresh one differs from it (the deposits since it was computed).

    The forces are compared, not the walks after the reflection: the force's change moves the
    walker by ``dt**2 / 2`` times it per step (dt = 2e-4), so 25 steps later the walks differ by
    about float32's resolution of ``x``, and whether the final ``x`` differs was one CPU's
    rounding (it did on AVX-512, not on AVX2: issue 51).
    """
    forces = _recorded_forces(monkeypatch)
    kept = continue_walk(walk, 40, log_every=1)
    kept_forces = forces[:]
    forces.clear()
    fresh = continue_walk(walk, 40, log_every=1, wall_force="fresh")
    assert (kept["wall_force"], fresh["wall_force"]) == ("kept", "fresh")
    first = next(i for i, r in enumerate(kept["log"]) if r["walls"] > 0)  # the toy walk meets the wall
    assert first > 0 and kept["log"][: first + 1] == fresh["log"][: first + 1]
    assert all(torch.equal(k, f) for k, f in zip(kept_forces[:first], forces[:first]))
    carried = kept_forces[first - 1]
    assert torch.equal(kept_forces[first], carried)  # kept: not recomputed, to the bit
    # fresh: recomputed under the S the deposits changed; about 5% of the force here, far above
    # float32 rounding (1e-7 relative) on any CPU.
    assert (forces[first] - carried).norm() > 1e-3 * carried.norm()
    assert "wall_force" not in load_checkpoint(walk).config["wlmd"]  # the walk kept it


def test_the_classic_schedule_restarts_ln_f_at_one(walk):
    """The walk's own ramp is at ln f = 0.01 or below; the classic schedule deposits 1 until its
    first flatness check (every 1,000 steps, beyond these 30).
    """
    run = continue_walk(walk, 30, schedule="classic", log_every=10)
    assert run["schedule"] == "classic" and run["edges"] == "linear"
    assert run["halvings"] == 0 and [r["ln_f"] for r in run["log"]] == [1.0, 1.0, 1.0]


def test_the_wall_force_is_measured_where_the_walker_was_saved(walk):
    """Where the walker was saved; the force in an outer half-bin is tests/oracle/test_wlmd.py's."""
    saved = load_checkpoint(walk).train_state["wlmd"]["cv"][0]
    flat, linear = wall_force(walk, "flat"), wall_force(walk, "linear")
    for force in (flat, linear):
        assert (force["x"], force["y"]) == pytest.approx(saved.tolist())
        assert abs(force["along_x"]) <= force["force"] * (1 + 1e-6)  # float32
        assert abs(force["kept_along_x"]) <= force["kept_force"] * (1 + 1e-6)  # float32
    # The drift it measures is the one the walk takes next (noise only enters the velocity after it).
    (step,) = continue_walk(walk, 1, edges="flat", log_every=1)["log"]
    assert step["walls"] == 0 and step["x"] == pytest.approx(flat["x"] + flat["drift_dx"], abs=1e-6)
    assert flat["drift_dx"] == linear["drift_dx"] != 0  # the carried force does not depend on the edges
    assert flat["x_edge"] == linear["x_edge"] and flat["x_top_centre"] < flat["x_edge"]
    with pytest.raises(ConfigError, match="valid: classic, walk"):
        continue_walk(walk, 10, schedule="flat-histogram")


def test_the_wall_check_script_measures_and_writes_both_continuations(walk, tmp_path, capsys):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "scripts" / "long_runs" / "study_b_wall_check.py"
    spec = importlib.util.spec_from_file_location("study_b_wall_check", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    for argv, message in (
        ([str(tmp_path)], "has no checkpoints/"),
        ([str(walk), "--steps", "5"], "at least 100"),
    ):
        with pytest.raises(SystemExit) as stop:
            script.main(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err
    out = tmp_path / "wall" / "seed_0.json"
    assert script.main([str(walk), "--steps", "100", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["forces"]) == {"flat", "linear"}
    assert [(c["schedule"], c["edges"], c["steps"]) for c in result["continuations"]] == [
        ("walk", "linear", 100),
        ("classic", "linear", 100),
    ]
    printed = capsys.readouterr().out
    assert "flat edges: walker at x" in printed and "classic ln f, kept wall force: 100 steps" in printed
    assert [c["wall_force"] for c in result["continuations"]] == ["kept", "kept"]  # as the walk ran

    assert (
        script.main(
            [str(walk), "--steps", "100", "--out", str(out), "--wall-force", "fresh", "--schedule", "walk"]
        )
        == 0
    )
    (fresh,) = json.loads(out.read_text())["continuations"]
    assert (fresh["schedule"], fresh["wall_force"]) == ("walk", "fresh")
    assert fresh["log"][0]["step"] == result["continuations"][0]["log"][0]["step"]
