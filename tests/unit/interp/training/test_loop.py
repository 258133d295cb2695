"""The training engine on tiny runs: metrics, milestones, schedules, constraints, bad input."""

from __future__ import annotations

import json
import math
import shutil
import time

import pytest
import torch

from interp.errors import ConfigError
from interp.metrics import milestones
from interp.store.checkpoint import list_checkpoints, load_checkpoint
from interp.store.run_folder import read_done, read_metrics, write_compute
from interp.training import TrainConfig, train
from interp.training.eval_steps import log_spaced_steps, schedule
from models import build_model, preset_config
from tasks import ModAddTask, MPSPTask

TINY_MPSP = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75)


def _train(tmp_path, task, preset="mpsp-1l1h", **config):
    config = TrainConfig(**{"epochs": 12, "eval_every": 4, "eval_log_points": 0, **config})
    model = build_model(preset_config(preset, task), seed=config.seed)
    summary = train(tmp_path / "run", model, task, config, progress=False)
    return model, summary, read_metrics(tmp_path / "run")


def test_metrics_cover_every_split_and_group_on_schedule(tmp_path):
    _, summary, records = _train(tmp_path, TINY_MPSP)
    assert [r["step"] for r in records] == [0, 4, 8, 12]
    for key in (
        "train/acc",
        "train/consistent/acc",
        "train/opposing/loss",
        "val/consistent/acc",
        "adv/opposing/acc",
    ):
        assert key in records[-1]
    # The train split holds exactly round(r * N) consistent examples: the overall loss is their
    # count-weighted mean with the opposing group's.
    r = round(0.75 * 128) / 128
    last = records[-1]
    assert last["train/loss"] == pytest.approx(
        r * last["train/consistent/loss"] + (1 - r) * last["train/opposing/loss"], rel=1e-5
    )
    assert summary == read_done(tmp_path / "run")
    assert summary["final"] == last and summary["epochs"] == 12
    assert set(summary["milestones"]) == set(MPSPTask.milestones)


def test_metrics_equal_an_independent_evaluation_of_the_saved_weights(tmp_path):
    model, _, records = _train(tmp_path, TINY_MPSP)
    adv = TINY_MPSP.splits(0)["adv"]
    ckpt = load_checkpoint(tmp_path / "run")
    model.load_state_dict(ckpt.state_dict)
    with torch.no_grad():
        logits = model(adv.tokens)[:, -1]
    assert records[-1]["adv/acc"] == pytest.approx((logits.argmax(-1) == adv.labels).float().mean().item())
    assert records[-1]["adv/loss"] == pytest.approx(
        torch.nn.functional.cross_entropy(logits, adv.labels).item(), rel=1e-5
    )


def test_study_c_milestones_on_the_quadratic_mlp(tmp_path):
    task = ModAddTask(p=7, train_frac=0.6, xi=0.2)
    _, summary, records = _train(
        tmp_path, task, preset="quadratic-mlp", loss="mse", lr=1e-2, weight_decay=1.0, epochs=6, eval_every=1
    )
    assert set(summary["milestones"]) == {"t_mem_clean", "t_mem_noisy", "t_gen"}
    assert "train/corrupted/acc" in records[-1] and "test/acc" in records[-1]
    assert summary["milestones"] == milestones(records, ModAddTask.milestones)


def test_milestones_on_a_synthetic_stream():
    records = [{"step": s, "adv/acc": a} for s, a in [(0, 0.5), (10, 1.0), (20, 0.9), (30, 1.0), (40, 0.95)]]
    got = milestones(records, {"generalized": ("adv/acc", 1.0), "never": ("val/acc", 0.5)})
    assert got["generalized"] == {"metric": "adv/acc", "threshold": 1.0, "step": 10, "kept": False}
    assert got["never"]["step"] is None and got["never"]["kept"] is False
    records.append({"step": 50, "adv/acc": 1.0})
    assert milestones(records, {"g": ("adv/acc", 1.0)})["g"]["kept"] is True


def test_a_milestone_over_two_metrics_needs_both_at_one_evaluation():
    # adv reaches 1.0 at step 10 (the inverted shortcut), val only at 20 while adv dips: the
    # "rule" (both at 1.0 at once) is first reached at 30, then lost at 40.
    acc = [(0, 0.5, 0.5), (10, 0.2, 1.0), (20, 1.0, 0.9), (30, 1.0, 1.0), (40, 1.0, 0.99)]
    records = [{"step": s, "val/acc": v, "adv/acc": a} for s, v, a in acc]
    got = milestones(records, {"rule": (("val/acc", "adv/acc"), 1.0), "generalized": ("adv/acc", 1.0)})
    assert got["rule"] == {"metric": "val/acc & adv/acc", "threshold": 1.0, "step": 30, "kept": False}
    assert got["generalized"]["step"] == 10
    # A record missing one of the keys neither reaches nor decides "kept".
    records.append({"step": 50, "adv/acc": 1.0})
    assert milestones(records, {"rule": (("val/acc", "adv/acc"), 1.0)})["rule"]["kept"] is False


def test_study_a_runs_report_rule_and_memorized_beside_generalized(tmp_path):
    _, summary, records = _train(tmp_path, TINY_MPSP, epochs=4, eval_every=2)
    assert set(summary["milestones"]) == {"generalized", "rule", "memorized", "generalized-99", "rule-99"}
    assert summary["milestones"]["rule"]["metric"] == "val/acc & adv/acc"
    assert summary["milestones"]["memorized"]["metric"] == "train/opposing/acc"
    assert summary["milestones"] == milestones(records, MPSPTask.milestones)


def test_weight_norm_constraint_holds_after_every_step(tmp_path):
    task = ModAddTask(p=5, train_frac=0.6)
    model, _, _ = _train(tmp_path, task, preset="modadd-1l", weight_norm=3.0, epochs=3)
    norm = math.sqrt(sum(p.detach().square().sum().item() for p in model.parameters()))
    assert norm == pytest.approx(3.0, rel=1e-5)


def test_checkpoint_schedule_is_log_spaced_and_includes_start_and_end(tmp_path):
    _train(tmp_path, TINY_MPSP, epochs=100, eval_every=50, checkpoint_log_points=6)
    steps = list_checkpoints(tmp_path / "run")
    assert steps == schedule(100, None, 6, include_zero=True)
    assert steps[0] == 0 and steps[-1] == 100 and steps[1] < 5  # dense early


def test_log_spaced_steps():
    assert log_spaced_steps(1000, 4) == {1, 10, 100, 1000}
    assert log_spaced_steps(10, 0) == set()
    assert max(log_spaced_steps(15000, 50)) == 15000


def test_minibatch_runs_are_reproducible(tmp_path):
    a, _, rec_a = _train(tmp_path / "a", TINY_MPSP, batch_size=50, epochs=4)
    b, _, rec_b = _train(tmp_path / "b", TINY_MPSP, batch_size=50, epochs=4)
    assert rec_a == rec_b
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_other_config_in_the_same_folder_is_refused(tmp_path):
    _train(tmp_path, TINY_MPSP, epochs=2)
    with pytest.raises(ConfigError, match="train.lr"):
        _train(tmp_path, TINY_MPSP, epochs=2, lr=3e-3)


@pytest.mark.parametrize(
    "field, value",
    [
        ("epochs", 0),
        ("lr", -1.0),
        ("loss", "hinge"),
        ("weight_norm", 0.0),
        ("betas", (0.9, 1.0)),
        ("batch_size", 0),
    ],
)
def test_bad_train_config_names_the_value(field, value):
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**{field: value})


def test_a_run_records_its_cpu_time_counting_earlier_sessions(tmp_path, monkeypatch):
    """compute.json holds the run's CPU time, updated at every checkpoint; a resumed run adds its
    own to what earlier sessions recorded (frozen clock: the resumed session adds nothing), and
    an older run's unrecorded time is not made up.
    """
    train = {"checkpoint_every": 4, "checkpoint_log_points": 0}
    _, summary, _ = _train(tmp_path, TINY_MPSP, **train)
    run = tmp_path / "run"
    first = json.loads((run / "compute.json").read_text())
    assert first["cpu_seconds"] > 0 and "process CPU time" in first["how"]

    def kill_after_step_8(recorded: float | None) -> None:
        shutil.rmtree(run / "checkpoints" / "step_000012")
        (run / "checkpoints" / "LATEST").write_text("step_000008\n")
        (run / "DONE").unlink()
        (run / "compute.json").unlink()
        if recorded is not None:
            write_compute(run, recorded, "an earlier session")

    monkeypatch.setattr(time, "process_time", lambda: 7.0)
    kill_after_step_8(recorded=100.0)
    _, resumed, _ = _train(tmp_path, TINY_MPSP, **train)
    assert resumed == summary  # DONE holds results only: the measurement stays out of it
    assert json.loads((run / "compute.json").read_text())["cpu_seconds"] == 100.0
    kill_after_step_8(recorded=None)  # as if trained so far by an interp that did not count
    assert _train(tmp_path, TINY_MPSP, **train)[1] == summary
    assert not (run / "compute.json").exists()
