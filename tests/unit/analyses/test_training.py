"""`analyses.training`: the memory check of run specs, alone and as one vectorised group."""

from __future__ import annotations

import pytest

import interp.training.memory as memory
from analyses.recipes import plan_runs
from analyses.training import check_specs_memory
from interp.errors import ConfigError
from models import build_model
from models.config import config_from_dict
from tasks import task_from_dict

TASK = {"vocab": 8, "n_train": 64, "n_val": 32, "n_adv": 32}


def _total(spec, seeds: int) -> int:
    """The estimate from a model actually built (not on the meta device), for `seeds` at once."""
    n_params = sum(p.numel() for p in build_model(spec.model, seed=0).parameters())
    task = task_from_dict(spec.task)
    parts = memory.estimate_bytes(
        task, config_from_dict(spec.model), n_params, spec.train["batch_size"], seeds
    )
    return sum(parts.values())


def test_seeds_trained_together_are_estimated_together(tmp_path, monkeypatch):
    specs = plan_runs("mpsp-1l1h", TASK, {"epochs": 1}, [0, 1, 2, 3], tmp_path)
    one, four = _total(specs[0], 1), _total(specs[0], 4)
    assert four > one
    monkeypatch.setattr(memory, "available_bytes", lambda: (one + four) // 2)
    check_specs_memory(specs)  # four separate runs: each fits on its own
    with pytest.raises(ConfigError, match=r"this run needs about .* GB are available"):
        check_specs_memory(specs, together=True)  # four seeds held at once do not
    monkeypatch.setattr(memory, "available_bytes", lambda: one - 1)
    with pytest.raises(ConfigError, match="examples"):
        check_specs_memory(specs)
