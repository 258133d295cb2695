"""Training run specs: a `RunSpec` (plain data) -> its task and model -> a trained run folder.

The write side's counterpart of `analyses.subject` (which opens a checkpoint as a model, a
task and its splits): the one place where a run spec's task (`tasks`) and model (`models`)
are built and handed to the training engine (`interp.training`). It lives in `analyses`, not
in `interp`, because it must import `models` and `tasks`, which `interp` never does (outside
its composition root, `interp.cli`, which nothing may import: study drivers such as
`analyses.studies.study_c.tables` train specs too). It knows no study: which task and settings a
preset trains with is `analyses.recipes`' business, decided before a spec exists.

* `check_specs_memory(specs)`: refuse, up front, specs whose data and model would not fit in
  memory (`interp.training.memory`), before any of them trains. `interp train` and
  `interp sweep` call it once over all their specs.
* `train_spec(spec)`: train (or resume, or skip if done) one spec's run. It is module-level
  and takes only picklable data, so the same function runs in this process (`interp train`),
  in sweep workers (`interp.sweep.pool`) and in Slurm jobs (`interp sweep`).
* `train_specs_vectorized(specs)`: seeds of one shape as one vectorised model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interp.config import from_dict
from interp.errors import ConfigError
from interp.sweep.specs import RunSpec
from interp.training.config import TrainConfig
from tasks import task_from_dict

__all__ = ["check_specs_memory", "train_spec", "train_specs_vectorized"]


def check_specs_memory(specs: Sequence[RunSpec], *, together: bool = False) -> None:
    """Refuse `specs` up front if a run's data and model would not fit in memory.

    Each model is built on torch's meta device to count its parameters: nothing is allocated.

    Args:
        specs: The runs about to train.
        together: The specs train as one vectorised model (`train_specs_vectorized`): their
            seeds are held at once, so they are estimated as one run of ``len(specs)`` seeds
            (the specs then share one task and one model shape).

    Raises:
        ConfigError: With the estimated and the available memory of the first run that does
            not fit.
    """
    import torch

    from interp.training.memory import check_memory
    from models import build_model
    from models.config import config_from_dict

    groups = [(specs[0], len(specs))] if together and specs else [(spec, 1) for spec in specs]
    for spec, seeds in groups:
        where = str(spec.out / "config.json")
        task = task_from_dict(spec.task, where=where)
        config = from_dict(TrainConfig, spec.train, where=where)
        with torch.device("meta"):
            n_params = sum(p.numel() for p in build_model(spec.model, seed=0).parameters())
        check_memory(task, config_from_dict(spec.model), n_params, config.batch_size, seeds)


def train_spec(spec: RunSpec, *, device: str = "cpu", progress: bool = False) -> dict[str, Any]:
    """Build the task and model of `spec` and train (or resume, or skip if done) its run.

    Memory is not checked here: the caller checks every spec it is about to train once, up
    front (`check_specs_memory`), so a grid too large is refused before any run starts.

    Returns:
        The run summary (as written to `DONE`).
    """
    from interp.training import train  # torch: only when training (the CLI reads this module first)
    from interp.training.memory import keep_freed_memory
    from models import build_model

    keep_freed_memory()  # the step reuses its large buffers instead of page-faulting them in
    where = str(spec.out / "config.json")
    config = from_dict(TrainConfig, spec.train, where=where)
    task = task_from_dict(spec.task, where=where)
    model = build_model(spec.model, seed=config.seed)
    return train(spec.out, model, task, config, device=device, progress=progress)


def train_specs_vectorized(
    specs: list[RunSpec], *, device: str = "cpu", progress: bool = False
) -> list[dict[str, Any]]:
    """Train seeds of one shape (specs differing only in the seed) as one vectorised model.

    See `interp.training.vectorized.train_vectorized`; returns each run's summary in the order
    of `specs`. Memory is the caller's check (``check_specs_memory(specs, together=True)``).

    Raises:
        ConfigError: If the specs differ in task, model or anything but the training seed.
    """
    from interp.training import train_vectorized
    from interp.training.memory import keep_freed_memory
    from models import build_model

    for spec in specs[1:]:  # one task object serves every seed; models and configs are checked there
        if spec.task != specs[0].task:
            raise ConfigError(
                f"vectorised runs must share one task; {spec.out} and {specs[0].out} differ",
                "train them as separate groups",
            )
    keep_freed_memory()
    where = [str(spec.out / "config.json") for spec in specs]
    configs = [from_dict(TrainConfig, spec.train, where=w) for spec, w in zip(specs, where)]
    task = task_from_dict(specs[0].task, where=where[0])
    models = [build_model(spec.model, seed=config.seed) for spec, config in zip(specs, configs)]
    return train_vectorized(
        [spec.out for spec in specs], models, task, configs, device=device, progress=progress
    )
