"""Sweep grids: a base configuration times axes times seeds -> run specs.

A `Grid` names model presets, base task and training options, axes (task or training fields,
each with a list of values) and a number of seeds. `expand` turns it into `RunSpec`s whose
folders are named by their coordinates (``mpsp-2l2h/r=0.9/seed_3``) and whose seeds derive from
the sweep seed (see `interp.sweep.specs`). The named grids `interp sweep --grid` knows are the
studies' (`analyses.studies.grids.GRIDS`); a grid can also come from a JSON file (`grid_from_dict`).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyses import recipes
from interp.config import from_dict
from interp.errors import ConfigError, did_you_mean
from interp.sweep.specs import RunSpec, derive_seed, seed_folder
from interp.training.config import TrainConfig
from models.presets import preset_names


@dataclass(frozen=True)
class Grid:
    """A sweep: presets x axes x seeds.

    Attributes:
        presets: Model presets, built-in or plugins' (each brings its task and training
            defaults, `analyses.recipes.preset_settings`).
        task: Task options applied to every run (e.g. ``{"vocab": 16}``).
        train: Training options applied to every run (e.g. ``{"epochs": 3000}``).
        axes: Fields to sweep, each with its values; a field of the task config is set on
            the task, any other on the training config (e.g. ``{"r": [0.5, 0.9]}``).
        seeds: Seeds per configuration.
        sweep_seed: The seed every run's seeds derive from.
        data_seeds: A crossed design: this many data seeds, each with every one of the `seeds`
            model seeds (the same initialisations on every training set), in folders
            ``data_<d>/seed_<m>``. None (the default): seed index `i` brings its own data and
            initialisation.
    """

    presets: tuple[str, ...]
    task: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)
    seeds: int = 1
    sweep_seed: int = 0
    data_seeds: int | None = None

    def __post_init__(self) -> None:
        names = preset_names()  # the built-ins and the plugins' (none imported here)
        for preset in self.presets:
            if preset not in names:
                raise ConfigError(f"unknown preset {preset!r} in the grid", did_you_mean(preset, names))
        if not isinstance(self.seeds, int) or self.seeds < 1:
            raise ConfigError(f"seeds={self.seeds!r} must be a positive integer")
        if self.data_seeds is not None and (not isinstance(self.data_seeds, int) or self.data_seeds < 1):
            raise ConfigError(f"data_seeds={self.data_seeds!r} must be a positive integer, or null")
        for name, values in self.axes.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise ConfigError(f"axis {name!r} needs a non-empty list of values, got {values!r}")


def expand(grid: Grid, sweep_dir: str | Path) -> list[RunSpec]:
    """Return one `RunSpec` per preset x axis combination x seed, foldered by coordinates.

    Raises:
        ConfigError: If an axis names a field of neither the task nor `TrainConfig`, or any
            resulting config is invalid.
    """
    sweep_dir = Path(sweep_dir)
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    names = list(grid.axes)
    specs = []
    for preset in grid.presets:
        task_fields = recipes.task_fields(preset)
        for unknown in set(names) - task_fields - train_fields:
            raise ConfigError(
                f"axis {unknown!r} is neither a task nor a training field",
                did_you_mean(unknown, task_fields | train_fields),
            )
        for values in itertools.product(*(grid.axes[n] for n in names)):
            point = dict(zip(names, values))
            base = recipes.recipe(
                preset, {**grid.task, **{k: v for k, v in point.items() if k in task_fields}}
            )
            train = {**grid.train, **{k: v for k, v in point.items() if k not in task_fields}}
            folder = sweep_dir.joinpath(preset, *(f"{k}={v}" for k, v in point.items()))
            for data, index in _seed_pairs(grid):
                seeds = {
                    "seed": derive_seed(grid.sweep_seed, index, base.model),
                    "data_seed": derive_seed(grid.sweep_seed, index if data is None else data, "data"),
                }
                where = folder if data is None else folder / f"data_{data}"
                tags = {"preset": preset, **point, **({} if data is None else {"data": data}), "seed": index}
                specs.append(base.spec(seed_folder(where, index), {**train, **seeds}, tags))
    return specs


def _seed_pairs(grid: Grid) -> list[tuple[int | None, int]]:
    """(data index, model seed index) of each run of a configuration: paired, or crossed."""
    if grid.data_seeds is None:
        return [(None, index) for index in range(grid.seeds)]
    return [(data, index) for data in range(grid.data_seeds) for index in range(grid.seeds)]


def grid_from_dict(data: dict[str, Any]) -> Grid:
    """Build a `Grid` from JSON (strict: unknown keys are errors)."""
    return from_dict(Grid, data, where="the grid")
