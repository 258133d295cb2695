"""Train a `RunSpec`: the one place where run specs meet models and tasks.

`train_spec` is module-level and takes only picklable data, so the same function runs in
this process (`interp train`), in joblib workers and in Slurm jobs (`interp sweep`).
"""

from __future__ import annotations

from typing import Any

from interp.config import from_dict
from interp.sweep.specs import RunSpec
from interp.errors import ConfigError
from interp.training import TrainConfig, train
from models import build_model
from models.fast_forward import keep_freed_memory
from tasks import task_from_dict


def train_spec(spec: RunSpec, *, device: str = "cpu", progress: bool = False) -> dict[str, Any]:
    """Build the task and model of `spec` and train (or resume, or skip if done) its run.

    Returns:
        The run summary (as written to `DONE`).
    """
    keep_freed_memory()  # the step reuses its large buffers instead of page-faulting them in
    where = str(spec.out / "config.json")
    config = from_dict(TrainConfig, spec.train, where=where)
    task = task_from_dict(spec.task, where=where)
    model = build_model(spec.model, seed=config.seed)
    return train(spec.out, model, task, config, device=device, progress=progress)


def train_specs_vectorized(specs: list[RunSpec], *, device: str = "cpu", progress: bool = False) -> list[dict[str, Any]]:
    """Train seeds of one shape (specs differing only in the seed) as one vectorised model.

    See `interp.training.vectorized.train_vectorized`; returns each run's summary in the order of `specs`.

    Raises:
        ConfigError: If the specs differ in task, model or anything but the training seed.
    """
    from interp.training.vectorized import train_vectorized

    for spec in specs[1:]:  # one task object serves every seed; models and configs are checked there
        if spec.task != specs[0].task:
            raise ConfigError(f"vectorised runs must share one task; {spec.out} and {specs[0].out} differ",
                              "train them as separate groups")
    keep_freed_memory()
    where = [str(spec.out / "config.json") for spec in specs]
    configs = [from_dict(TrainConfig, spec.train, where=w) for spec, w in zip(specs, where)]
    task = task_from_dict(specs[0].task, where=where[0])
    models = [build_model(spec.model, seed=config.seed) for spec, config in zip(specs, configs)]
    return train_vectorized([spec.out for spec in specs], models, task, configs, device=device, progress=progress)
