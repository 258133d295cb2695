"""Vectorised multi-seed training computes what separate runs compute (`interp.training.vectorized`).

The reference is the ordinary engine (`interp.training.TrainLoop`), one run per seed. The
contract is per step: from one shared state (weights, AdamW moments, minibatch order), one
vectorised step and each seed's separate step compute the same parameters, AdamW moments and
metrics; only the order of float sums differs (the stacked forward batches seeds; a separate
fp32 run on the CPU also takes the CSR path of `models.csr`, which `torch.func` cannot, and
which `tests/unit/models/test_csr.py` checks against the dense path). The tests teacher-force:
before every step the stacked model is rebuilt from the separate runs' state.

The per-step comparison runs in float64. In float32 it cannot be exact to a stated tolerance on
the study presets: a ReLU pre-activation within rounding of zero takes either gate, and one
example's flipped subgradient moves AdamW's moments by more than rounding. Measured on
`mpsp-2l2h` (vocab 12, 12 seeds, lr 3e-3): with the CSR path, seed 2 flips one layer-1 MLP gate
at step 3 (fp64 pre-activation +2.8e-7, CSR fp32 -3.7e-8, dense fp32 +7.4e-8), which puts its
`W_E` first moment 1e-4 of the tensor's scale apart in one step. In float64 every moment of
every case agrees to 1e-13 of its scale (b_K's aside, see below). Equal trajectories over many
steps are not the contract in float32 either (rounding at kinks is amplified: with the dense
path in both engines, 5 of seeds 0-11 end more than 1e-5 apart after 5 steps), so whole runs
are compared by their first step and by what rounding cannot flip (every seed learns its tiny
task in both engines). That stacked seeds equal separate runs only up to rounding is also why a
run records its engine and resumes only with it. A vectorised group resumed from checkpoints is
bit-identical to an uninterrupted group (same engine, same order of sums).
"""

from __future__ import annotations

import contextlib
import copy
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from interp.errors import ConfigError
from interp.metrics import evaluate
from interp.splits import split_digests
from interp.store import open_run
from interp.store.checkpoint import list_checkpoints, load_checkpoint
from interp.store.run_folder import read_metrics
from interp.training import TrainConfig, TrainLoop, run_config, train
from interp.training.vectorized import StackedSeeds, train_vectorized
from models import build_model, preset_config
from tasks import ModAddTask, MPSPTask

TINY_MPSP = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75)
TINY_MODADD = ModAddTask(p=7, train_frac=0.6, xi=0.2)
SEEDS = (0, 1, 2)
MANY_SEEDS = tuple(range(12))

# Tolerances of one float64 step from a shared state (measured worst over MANY_SEEDS x 4 steps
# of the cases below, at 1 and 2 threads, in brackets): AdamW moments 1e-10 of the tensor's
# largest entry [1e-13], parameters 1e-10 absolute [3e-12], metrics 1e-10 absolute. A wrong
# seed, minibatch, order or scale moves them by O(1); float64 rounding by ~1e-16 of the scale.
MOMENT_RTOL = 1e-10
PARAM_ATOL = 1e-10
METRIC_ATOL = 1e-10
# Whole runs in float32 (the quadratic MLP: no kinks), first step: parameters and metrics.
FP32_ATOL = 1e-5

# The per-step cases: the study presets as trained (mpsp-* use ReLU), minibatches with each
# seed's own order, and study C's quadratic MLP with MSE and study B's sphere projection.
STEP_CASES = {
    "mpsp-1l1h": ("mpsp-1l1h", TINY_MPSP, {}),
    "mpsp-2l2h": ("mpsp-2l2h", TINY_MPSP, {}),
    "minibatches": ("mpsp-2l1h", TINY_MPSP, {"batch_size": 48}),  # 3 steps an epoch
    "quadratic-mse-norm": (
        "quadratic-mlp",
        TINY_MODADD,
        {"loss": "mse", "lr": 1e-2, "weight_decay": 1.0, "weight_norm": 3.0},
    ),
}


def _config(seed: int, **fields) -> TrainConfig:
    return TrainConfig(
        **{"epochs": 5, "eval_every": 1, "eval_log_points": 0, "lr": 3e-3, **fields}, seed=seed
    )


def _models(preset, task, seeds=SEEDS):
    return [build_model(preset_config(preset, task), seed=s) for s in seeds]


def _configs(**fields):
    return [_config(s, **fields) for s in SEEDS]


def _vectorized(root: Path, preset, task, **fields) -> list[Path]:
    dirs = [root / f"seed_{s}" for s in SEEDS]
    train_vectorized(dirs, _models(preset, task), task, _configs(**fields), progress=False)
    return dirs


def _separate(root: Path, preset, task, **fields) -> list[Path]:
    dirs = [root / f"seed_{s}" for s in SEEDS]
    for run, model, config in zip(dirs, _models(preset, task), _configs(**fields)):
        train(run, model, task, config, progress=False)
    return dirs


# --- one step from a shared state ------------------------------------------------------------


@contextlib.contextmanager
def _fresh_loops(root: Path, preset, task, seeds, **fields) -> Iterator[list[TrainLoop]]:
    """One separate float64 `TrainLoop` per seed, in fresh run folders under `root`, at their
    initial state (the float32 initialisation, widened).
    """
    splits = task.splits(0)
    with contextlib.ExitStack() as stack:
        loops = []
        for seed, model in zip(seeds, _models(preset, task, seeds=seeds)):
            model.to(torch.float64)
            config = _config(seed, **fields)
            run = stack.enter_context(
                open_run(root / f"seed_{seed}", run_config(model, task, config), split_digests(splits))
            )
            loop = TrainLoop(run, model, splits, config)
            loop.resume()  # fresh: the initial weights (projected onto the sphere if configured)
            loops.append(loop)
        yield loops


def _share(source: TrainLoop, target: TrainLoop) -> None:
    """Give `target` the weights, AdamW state and minibatch generator of `source` (copies)."""
    target.model.load_state_dict(source.model.state_dict())
    target.optimizer.load_state_dict(copy.deepcopy(source.optimizer.state_dict()))
    target.generator.set_state(source.generator.get_state())


def _steps_from_shared_states(
    separate: list[TrainLoop], mirrors: list[TrainLoop], epochs: int
) -> Iterator[int]:
    """Step both engines `epochs` epochs, each optimizer step from the separate runs' state.

    Before each step the mirrors (the vectorised engine's loops) get the separate runs' state,
    then one `StackedSeeds.train_step` of the mirrors and one `TrainLoop.train_step` of each
    separate run take the same rows. Yields after each step, for the caller to compare.
    """
    for _ in range(epochs):
        batches = [loop.batches() for loop in separate]  # each seed's own order
        for k, first in enumerate(batches[0]):
            for loop, mirror in zip(separate, mirrors):
                _share(loop, mirror)
            stacked = StackedSeeds(mirrors)
            stacked.train_step(None if isinstance(first, slice) else torch.stack([b[k] for b in batches]))
            stacked.sync()
            for loop, rows in zip(separate, batches):
                assert loop.train_step(rows[k])
            yield k


def _assert_same_step(separate: TrainLoop, vectorised: TrainLoop, where: str) -> None:
    """The tolerances above, for one seed after one step from a shared state."""
    states = separate.optimizer.state_dict()["state"], vectorised.optimizer.state_dict()["state"]
    pairs = zip(separate.model.named_parameters(), vectorised.model.parameters())
    for index, ((name, p_sep), p_vec) in enumerate(pairs):
        assert p_sep.dtype == p_vec.dtype == torch.float64, (where, name)
        sep, vec = states[0][index], states[1][index]
        assert torch.equal(sep["step"], vec["step"]), (where, name)
        if name.endswith("attn.b_K"):
            # b_K's exact gradient is zero (a softmax is shift-invariant per query): its moments
            # are rounding noise in both engines, with no scale to compare against.
            for state in (sep, vec):
                assert state["exp_avg"].abs().max() < 1e-12, (where, name)
        else:
            for moment in ("exp_avg", "exp_avg_sq"):
                scale = sep[moment].abs().max().item()
                torch.testing.assert_close(
                    vec[moment], sep[moment], rtol=0, atol=MOMENT_RTOL * scale, msg=f"{where} {name} {moment}"
                )
        torch.testing.assert_close(p_vec, p_sep, rtol=0, atol=PARAM_ATOL, msg=f"{where} {name}")
    metrics = [evaluate(loop.model.readout, loop.splits, loop.config.loss) for loop in (separate, vectorised)]
    assert metrics[0].keys() == metrics[1].keys()
    for key, value in metrics[0].items():
        assert metrics[1][key] == pytest.approx(value, abs=METRIC_ATOL), (where, key)


@pytest.mark.parametrize("case", list(STEP_CASES))
def test_one_vectorised_step_equals_each_separate_step_from_the_same_state(tmp_path, case):
    preset, task, fields = STEP_CASES[case]
    with (
        _fresh_loops(tmp_path / "sep", preset, task, MANY_SEEDS, **fields) as separate,
        _fresh_loops(tmp_path / "vec", preset, task, MANY_SEEDS, **fields) as mirrors,
    ):
        steps = 0
        for step, k in enumerate(_steps_from_shared_states(separate, mirrors, epochs=4)):
            for seed, a, b in zip(MANY_SEEDS, separate, mirrors):
                _assert_same_step(a, b, f"seed {seed} step {step} (minibatch {k})")
            steps += 1
    assert steps == (12 if fields.get("batch_size") else 4)  # every optimizer step was compared
    if preset.startswith("mpsp"):
        assert separate[0].model.cfg.act_fn == "relu"  # the study presets, kinks and all


@pytest.mark.parametrize("fields", [{}, {"batch_size": 10}], ids=["full-batch", "minibatches"])
def test_vectorised_seeds_learn_what_separate_runs_learn(tmp_path, fields):
    """Whole runs: the first step agrees to rounding (nothing amplified yet), and every seed
    learns its training set in both engines, which rounding cannot flip.
    """
    task = ModAddTask(p=7, train_frac=0.6)  # 29 training pairs: learnt by epoch 20
    fields = {"epochs": 30, "eval_every": 10, "eval_log_points": 2, "lr": 1e-2, **fields}
    runs = [_vectorized(tmp_path / "vec", "quadratic-mlp", task, **fields)]
    runs.append(_separate(tmp_path / "sep", "quadratic-mlp", task, **fields))
    for vec, sep in zip(*runs):
        records = read_metrics(vec), read_metrics(sep)
        assert [r["step"] for r in records[0]] == [r["step"] for r in records[1]] == [0, 1, 10, 20, 30]
        assert records[0][0] == records[1][0]  # the initial state: one and the same
        assert records[0][1] == pytest.approx(records[1][1], abs=FP32_ATOL)
        first = [load_checkpoint(run / "checkpoints" / "step_000001").state_dict for run in (vec, sep)]
        for key, value in first[0].items():
            torch.testing.assert_close(value, first[1][key], atol=FP32_ATOL, rtol=0, msg=key)
        assert records[0][-1]["train/acc"] == records[1][-1]["train/acc"] == 1.0


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
