"""Train a `RunSpec`: the one place where run specs meet models and tasks.

`train_spec` is module-level and takes only picklable data, so the same function runs in
this process (`interp train`), in joblib workers and in Slurm jobs (`interp sweep`).
"""

from __future__ import annotations

from typing import Any

from interp.config import from_dict
from interp.sweep import RunSpec
from interp.training import TrainConfig, train
from models import build_model
from tasks import task_from_dict


def train_spec(spec: RunSpec, *, device: str = "cpu", progress: bool = False) -> dict[str, Any]:
    """Build the task and model of `spec` and train (or resume, or skip if done) its run.

    Returns:
        The run summary (as written to `DONE`).
    """
    where = str(spec.out / "config.json")
    config = from_dict(TrainConfig, spec.train, where=where)
    task = task_from_dict(spec.task, where=where)
    model = build_model(spec.model, seed=config.seed)
    return train(spec.out, model, task, config, device=device, progress=progress)
