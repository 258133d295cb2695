"""Vectorised multi-seed training equals training each seed on its own (`interp.training.vectorized`).

The reference is the ordinary engine (`interp.training.loop.train`), one run per seed: every
parameter, the AdamW state and the metrics must agree up to float rounding (the stacked
forward sums in another order; a separate run on CPU in fp32 also takes the CSR path of
`models.csr`, which `torch.func` cannot). A vectorised group resumed from checkpoints must be
bit-identical to an uninterrupted group.

"Up to rounding" holds step by step, and over the five steps compared here only where the loss
is smooth: a ReLU whose pre-activation lies within rounding of zero takes either gate
depending on the summation order, and AdamW turns that one example's subgradient into an
O(lr) difference that training carries on. Measured on `mpsp-2l2h` (vocab 12, 5 steps, lr
3e-3): with the dense path in both engines (no CSR at all) 5 of seeds 0-11 end more than 1e-5
apart; with the CSR path, seed 2 at 2 threads flips one layer-1 MLP gate at step 3 (fp64
pre-activation +2.8e-7, CSR fp32 -3.7e-8, dense fp32 +7.4e-8) and ends 2.4e-5 apart in `W_E`.
So the trajectory tests use GELU (`_smooth`): they then test that the engines compute the same
steps, which a bug would break by far more than 1e-5, and not which side of a kink rounding
falls. That stacked seeds equal separate runs only up to rounding is why a run's config
records its engine.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from interp.errors import ConfigError
from interp.store.checkpoint import list_checkpoints, load_checkpoint
from interp.store.run_folder import read_metrics
from interp.training import TrainConfig, train
from interp.training.vectorized import train_vectorized
from models import build_model, preset_config
from tasks import ModAddTask, MPSPTask

TINY_MPSP = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75)
SEEDS = (0, 1, 2)


def _models(preset, task, act_fn=None):
    config = preset_config(preset, task)
    if act_fn is not None:
        config = dataclasses.replace(config, act_fn=act_fn)
    return [build_model(config, seed=s) for s in SEEDS]


# GELU for the trajectories compared to 1e-5: no kink for rounding to fall either side of
# (see the module docstring).
_smooth = "gelu"


def _configs(**fields):
    return [
        TrainConfig(**{"epochs": 5, "eval_every": 1, "eval_log_points": 0, "lr": 3e-3, **fields}, seed=s)
        for s in SEEDS
    ]


def _vectorized(root: Path, preset, task, act_fn=None, **fields) -> list[Path]:
    dirs = [root / f"seed_{s}" for s in SEEDS]
    train_vectorized(dirs, _models(preset, task, act_fn), task, _configs(**fields), progress=False)
    return dirs


def _separate(root: Path, preset, task, act_fn=None, **fields) -> list[Path]:
    dirs = [root / f"seed_{s}" for s in SEEDS]
    for run, model, config in zip(dirs, _models(preset, task, act_fn), _configs(**fields)):
        train(run, model, task, config, progress=False)
    return dirs


def _assert_close_runs(a: Path, b: Path, atol: float) -> None:
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    assert ca.step == cb.step and list_checkpoints(a) == list_checkpoints(b)
    for key, value in ca.state_dict.items():
        if key.endswith("attn.b_K"):
            # b_K's exact gradient is zero (a softmax is shift-invariant per query), so AdamW
            # normalises pure rounding noise into +-lr steps that differ between any two
            # summation orders; the function does not depend on it.
            continue
        torch.testing.assert_close(value, cb.state_dict[key], atol=atol, rtol=0, msg=key)
    state_a, state_b = ca.train_state["optimizer"]["state"], cb.train_state["optimizer"]["state"]
    assert state_a.keys() == state_b.keys() and state_a
    for index in state_a:
        assert torch.equal(state_a[index]["step"], state_b[index]["step"])
        torch.testing.assert_close(state_a[index]["exp_avg"], state_b[index]["exp_avg"], atol=atol, rtol=0)
    records_a, records_b = read_metrics(a), read_metrics(b)
    assert [r.keys() for r in records_a] == [r.keys() for r in records_b]
    for ra, rb in zip(records_a, records_b):
        for key in ra:
            assert ra[key] == pytest.approx(rb[key], abs=1e-5), (ra["step"], key)


@pytest.mark.parametrize("preset", ["mpsp-1l1h", "mpsp-2l2h"])
def test_vectorised_seeds_equal_separate_runs(tmp_path, preset):
    vec = _vectorized(tmp_path / "vec", preset, TINY_MPSP, _smooth)
    sep = _separate(tmp_path / "sep", preset, TINY_MPSP, _smooth)
    for a, b in zip(vec, sep):
        _assert_close_runs(a, b, atol=1e-5)


def test_vectorised_minibatches_equal_separate_runs(tmp_path):
    fields = {"batch_size": 48}  # 3 minibatches per epoch, each seed its own order
    vec = _vectorized(tmp_path / "vec", "mpsp-2l1h", TINY_MPSP, _smooth, **fields)
    sep = _separate(tmp_path / "sep", "mpsp-2l1h", TINY_MPSP, _smooth, **fields)
    for a, b in zip(vec, sep):
        _assert_close_runs(a, b, atol=1e-5)


def test_vectorised_quadratic_mlp_with_mse_and_weight_norm_equals_separate_runs(tmp_path):
    # Study C's loss, and study B's sphere projected per seed. (No attention biases here: with
    # b_K the projection would spread its noise - see above - over every weight through the norm.)
    task = ModAddTask(p=7, train_frac=0.6, xi=0.2)
    fields = {"loss": "mse", "lr": 1e-2, "weight_decay": 1.0, "weight_norm": 3.0}
    vec = _vectorized(tmp_path / "vec", "quadratic-mlp", task, **fields)
    sep = _separate(tmp_path / "sep", "quadratic-mlp", task, **fields)
    for a, b in zip(vec, sep):
        _assert_close_runs(a, b, atol=1e-6)
        weights = load_checkpoint(a).state_dict.values()
        assert torch.linalg.vector_norm(torch.cat([w.flatten() for w in weights])).item() == pytest.approx(
            3.0, rel=1e-5
        )


def test_the_callers_models_end_with_the_trained_weights(tmp_path):
    models = _models("mpsp-1l1h", TINY_MPSP)
    dirs = [tmp_path / f"seed_{s}" for s in SEEDS]
    train_vectorized(dirs, models, TINY_MPSP, _configs(), progress=False)
    for model, run in zip(models, dirs):
        for key, value in load_checkpoint(run).state_dict.items():
            assert torch.equal(model.state_dict()[key], value), key


def test_a_group_resumed_from_uneven_checkpoints_is_bit_identical(tmp_path):
    """A kill while the seeds are being saved leaves some a checkpoint ahead: all restart from
    the last step they share, and end bit-identical to a group that was never stopped.
    """
    fields = {"epochs": 8, "checkpoint_every": 2, "checkpoint_log_points": 0, "batch_size": 48}
    reference = _vectorized(tmp_path / "ref", "mpsp-2l1h", TINY_MPSP, **fields)
    resumed = _vectorized(tmp_path / "run", "mpsp-2l1h", TINY_MPSP, **fields)
    # Rewind: seed 0 keeps everything but DONE, seed 1 loses the checkpoints after step 4,
    # seed 2 after step 6 (and so does its LATEST).
    for run, keep in zip(resumed, (8, 4, 6)):
        (run / "DONE").unlink()
        for step in list_checkpoints(run):
            if step > keep:
                shutil.rmtree(run / "checkpoints" / f"step_{step:06d}")
        (run / "checkpoints" / "LATEST").write_text(f"step_{keep:06d}\n")
    _vectorized(tmp_path / "run", "mpsp-2l1h", TINY_MPSP, **fields)
    for a, b in zip(reference, resumed):
        ca, cb = load_checkpoint(a), load_checkpoint(b)
        assert ca.step == cb.step == 8
        for key in ca.state_dict:
            assert torch.equal(ca.state_dict[key], cb.state_dict[key]), key
        for index, state in ca.train_state["optimizer"]["state"].items():
            for name, value in state.items():
                assert torch.equal(value, cb.train_state["optimizer"]["state"][index][name]), (index, name)
        assert ca.train_state["generator"].equal(cb.train_state["generator"])
        assert read_metrics(a) == read_metrics(b)


def test_a_finished_seed_is_not_retrained(tmp_path):
    dirs = _vectorized(tmp_path, "mpsp-1l1h", TINY_MPSP)
    done = {run: (run / "DONE").stat().st_mtime_ns for run in dirs}
    (dirs[1] / "DONE").unlink()
    shutil.rmtree(dirs[1] / "checkpoints")
    summaries = train_vectorized(dirs, _models("mpsp-1l1h", TINY_MPSP), TINY_MPSP, _configs(), progress=False)
    assert [s["epochs"] for s in summaries] == [5, 5, 5]
    assert (dirs[0] / "DONE").stat().st_mtime_ns == done[dirs[0]]
    assert (dirs[1] / "DONE").exists()


def test_seeds_that_differ_in_more_than_the_seed_are_refused(tmp_path):
    configs = _configs()
    configs[1] = TrainConfig(epochs=5, eval_every=1, eval_log_points=0, lr=1e-3, seed=1)
    with pytest.raises(ConfigError, match=r"lr is 0.003 and 0.001"):
        train_vectorized(
            [tmp_path / str(s) for s in SEEDS], _models("mpsp-1l1h", TINY_MPSP), TINY_MPSP, configs
        )
    models = _models("mpsp-1l1h", TINY_MPSP)
    models[2] = build_model(preset_config("mpsp-2l1h", TINY_MPSP), seed=2)
    with pytest.raises(ConfigError, match="one model config"):
        train_vectorized([tmp_path / str(s) for s in SEEDS], models, TINY_MPSP, _configs())
    with pytest.raises(ConfigError, match="2 run folders, 3 models"):
        train_vectorized(
            [tmp_path / "a", tmp_path / "b"], _models("mpsp-1l1h", TINY_MPSP), TINY_MPSP, _configs()
        )
    assert not any(tmp_path.iterdir())  # nothing was created
