"""One training config: fine-tuning takes a `TrainConfig` with a `target_acc`, and every config
written before (run folders and the committed records under results/, fine-tuning ones included)
still loads, exactly, and a fine-tuning run started with the old form resumes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from interp.config import from_dict, to_dict
from interp.errors import ConfigError
from interp.store.run_folder import read_done
from interp.sweep.specs import SWEEP_FILE, read_sweep
from interp.training.config import FINETUNE_DEFAULTS, TrainConfig, finetune_config
from interp.training.finetuning import finetune
from interp.wlmd.sampler import WLMDConfig
from models import build_model, preset_config
from tasks import ModAddTask

RESULTS = Path(__file__).resolve().parents[4] / "results"
ALL_CONFIGS = sorted(RESULTS.rglob("config.json"))
# A WLMD walk's folder (study B's committed walk state) is not a training run: its "train" holds
# only the loss its collective variables are measured with, and its own config sits under "wlmd"
# or "wlmd_production".
WALK_KEYS = {"wlmd", "wlmd_production"}
CONFIGS = [p for p in ALL_CONFIGS if not WALK_KEYS & set(json.loads(p.read_text()))]
WALKS = [p for p in ALL_CONFIGS if p not in CONFIGS]
SWEEPS = sorted(RESULTS.rglob(SWEEP_FILE))
# How fine-tuning configs were written before they were TrainConfigs (every field, always).
OLD_FORM = {
    "lr": 0.002,
    "betas": [0.9, 0.98],
    "weight_decay": 0.0,
    "target_acc": 0.999,
    "max_steps": 6,
    "eval_every": 2,
    "checkpoint_every": 3,
    "weight_norm": None,
    "loss": "cross_entropy",
    "data_seed": 0,
}


def test_results_hold_both_forms():
    forms = {"max_steps" in json.loads(p.read_text())["train"] for p in CONFIGS}
    assert forms == {True, False} and SWEEPS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_committed_run_config_loads(path):
    train = json.loads(path.read_text())["train"]
    config = from_dict(TrainConfig, train, where=str(path))
    if "max_steps" in train:  # a fine-tuning run: the same run, field by field
        assert config.epochs == train["max_steps"] and config.target_acc == train["target_acc"]
        assert (config.eval_log_points, config.checkpoint_log_points, config.batch_size) == (0, 0, None)
        for key in set(train) - {"max_steps"}:
            assert to_dict(config)[key] == train[key], key
    else:  # a TrainConfig as written: it round-trips (target_acc None where it predates the field)
        assert to_dict(config) == train and config.target_acc == train.get("target_acc")


@pytest.mark.parametrize("path", WALKS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_committed_walk_config_loads(path):
    config = json.loads(path.read_text())
    assert set(config["train"]) == {"data_seed", "loss", "weight_norm"}
    if "wlmd" in config:
        assert to_dict(from_dict(WLMDConfig, config["wlmd"], where=str(path))) == config["wlmd"]


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_every_committed_sweep_spec_loads(path):
    specs, _ = read_sweep(path.parent)
    for spec in specs:
        assert to_dict(from_dict(TrainConfig, spec.train)) == spec.train


def test_the_old_form_migrates_exactly_and_unknown_keys_still_fail():
    config = from_dict(TrainConfig, OLD_FORM)
    assert config == finetune_config(lr=0.002, target_acc=0.999, epochs=6, eval_every=2, checkpoint_every=3)
    with pytest.raises(ConfigError, match="max_step"):
        from_dict(TrainConfig, {**OLD_FORM, "max_step": 3})
    assert set(FINETUNE_DEFAULTS) <= set(to_dict(finetune_config()))


def test_a_fine_tuning_run_written_in_the_old_form_resumes(tmp_path):
    task = ModAddTask(p=11, train_frac=0.6)
    run = tmp_path / "inject"
    config = finetune_config(lr=0.002, target_acc=0.999, epochs=6, eval_every=2, checkpoint_every=3)
    finetune(run, build_model(preset_config("modadd-1l", task), seed=0), task, config)
    first = read_done(run)
    # As an older interp wrote it: the fine-tuning config's own form; then killed before DONE.
    stored = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**stored, "train": OLD_FORM}))
    os.remove(run / "DONE")
    summary = finetune(run, build_model(preset_config("modadd-1l", task), seed=0), task, config)
    assert summary == first  # resumed from its last checkpoint, to the same stop
    assert json.loads((run / "config.json").read_text())["train"] == OLD_FORM  # left as written
    other = finetune_config(lr=0.003, target_acc=0.999, epochs=6, eval_every=2, checkpoint_every=3)
    os.remove(run / "DONE")
    with pytest.raises(ConfigError, match="train.lr"):
        finetune(run, build_model(preset_config("modadd-1l", task), seed=0), task, other)
