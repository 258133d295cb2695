"""Fixtures shared by the tests of `interp`'s run and checkpoint format."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from interp.store.run_folder import create_run

TINY_CONFIG = {
    "model": {"d_model": 8, "n_layers": 1},
    "task": {"name": "toy", "n": 16},
    "train": {"lr": 1e-3, "steps": 10, "betas": [0.9, 0.99]},
}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A freshly created run folder holding config.json and nothing else."""
    return create_run(tmp_path / "runs" / "tiny", TINY_CONFIG)


@pytest.fixture
def tiny_config() -> dict[str, Any]:
    """The config that `run_dir` was created with (a private copy to modify)."""
    return copy.deepcopy(TINY_CONFIG)
