"""Each run records the engine that trains it, and resumes only with that engine.

Stacked seeds (`interp.training.train_vectorized`) equal separate runs (`interp.training.train`)
only up to rounding (tests/unit/interp/training/test_vectorized.py says why), so a run that
switched engine half-way would be neither. `TrainConfig.engine` is an added field: a separate
run's config.json is written without it, as before it existed, so every older folder and
committed record loads and resumes as a separate run.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from interp.config import from_dict
from interp.errors import ConfigError
from interp.store.checkpoint import list_checkpoints, load_checkpoint
from interp.store.run_folder import check_engine, read_config, read_metrics
from interp.training import TrainConfig, train, train_vectorized
from interp.training.config import TRAIN_ENGINE
from models import build_model, preset_config
from tasks import ModAddTask

TASK = ModAddTask(p=5, train_frac=0.6)
SEEDS = (0, 1)


def _config(seed: int = 0, **fields) -> TrainConfig:
    return TrainConfig(
        epochs=4,
        eval_every=2,
        eval_log_points=0,
        checkpoint_every=2,
        checkpoint_log_points=0,
        seed=seed,
        **fields,
    )


def _model(seed: int = 0):
    return build_model(preset_config("quadratic-mlp", TASK), seed=seed)


def _separate(run, **fields):
    return train(run, _model(), TASK, _config(**fields), progress=False)


def _vectorized(root):
    dirs = [root / f"seed_{s}" for s in SEEDS]
    train_vectorized(dirs, [_model(s) for s in SEEDS], TASK, [_config(s) for s in SEEDS], progress=False)
    return dirs


def test_each_run_records_its_engine(tmp_path):
    _separate(tmp_path / "one")
    train_config = read_config(tmp_path / "one")["train"]
    assert "engine" not in train_config  # written as before the field existed
    assert from_dict(TrainConfig, train_config).engine == "separate"
    for run in _vectorized(tmp_path / "group"):
        train_config = read_config(run)["train"]
        assert train_config["engine"] == "vectorized"
        assert from_dict(TrainConfig, train_config) == _config(train_config["seed"], engine="vectorized")


def test_a_run_resumes_only_with_its_engine(tmp_path):
    group = _vectorized(tmp_path / "group")
    _separate(tmp_path / "one")
    before = {run: (run / "config.json").read_bytes() for run in [*group, tmp_path / "one"]}
    with pytest.raises(
        ConfigError, match=r"seed_0 was trained by the vectorized engine, not the separate one"
    ):
        train(group[0], _model(), TASK, _config(), progress=False)
    with pytest.raises(ConfigError, match=r"one was trained by the separate engine, not the vectorized one"):
        train_vectorized([tmp_path / "one"], [_model()], TASK, [_config()], progress=False)
    with pytest.raises(ConfigError, match=r"engine = 'vectorized', but train\(\) is the separate engine"):
        train(tmp_path / "new", _model(), TASK, _config(engine="vectorized"), progress=False)
    with pytest.raises(ConfigError, match=r"TrainConfig.engine = 'stacked' is not valid"):
        _config(engine="stacked")
    assert {run: (run / "config.json").read_bytes() for run in before} == before
    assert not (tmp_path / "new").exists()


def test_a_folder_without_a_recorded_engine_resumes_as_separate_bit_identically(tmp_path):
    """A run written before runs recorded their engine (config.json without it), killed after
    its step-2 checkpoint, resumes with the separate engine and ends as an uninterrupted run.
    """
    reference, run = tmp_path / "ref", tmp_path / "old"
    _separate(reference)
    _separate(run)
    assert "engine" not in json.loads((run / "config.json").read_text())["train"]
    check_engine(run, "separate", **TRAIN_ENGINE)
    (run / "DONE").unlink()
    shutil.rmtree(run / "checkpoints" / "step_000004")
    (run / "checkpoints" / "LATEST").write_text("step_000002\n")
    assert list_checkpoints(run) == [0, 2]
    _separate(run)
    a, b = load_checkpoint(reference), load_checkpoint(run)
    assert a.step == b.step == 4
    for key, value in a.state_dict.items():
        assert torch.equal(value, b.state_dict[key]), key
    assert read_metrics(reference) == read_metrics(run)


def test_a_sweep_refuses_stacked_seeds_before_training(tmp_path):
    """`interp sweep` trains one run per worker: a grid asking for stacked seeds, or a folder
    that stacked seeds trained, is refused up front (a resumed sweep keeps its engine).
    """
    from interp.cli.sweep import check_sweep_engine
    from interp.sweep.specs import RunSpec

    def spec(out, **train):
        return RunSpec(out, {"kind": "quadratic_mlp"}, TASK.to_dict(), {**_config().__dict__, **train})

    group = _vectorized(tmp_path / "group")
    _separate(tmp_path / "one")
    check_sweep_engine([spec(tmp_path / "new"), spec(tmp_path / "one")])
    with pytest.raises(ConfigError, match=r"grid's train.engine is 'vectorized'"):
        check_sweep_engine([spec(tmp_path / "new", engine="vectorized")])
    with pytest.raises(ConfigError, match=r"seed_1 was trained by the vectorized engine"):
        check_sweep_engine([spec(tmp_path / "one"), spec(group[1])])
