"""Recipes: what each model preset trains on and how, and the one merge into run specs.

A preset (`models.presets`) is an architecture. What a built-in preset is trained on, and with
which optimiser settings, is study knowledge and lives here: `PRESET_TASKS` and
`PRESET_TRAINING` (the studies' settings). A plugin's preset (`interp.plugins.Preset`, an
``interp.presets`` entry point or `models.presets.register_preset`) carries its own task and
training settings; `preset_settings` is the one hook that finds either. Options merge in one
order, in one place (`recipe` and `Recipe.spec`): the task's and `TrainConfig`'s own defaults,
then the preset's settings, then the caller's options. `interp train` (`plan_runs`) and the
sweep grids (`analyses.grids.expand`) both build their runs through it, so both take a plugin's
preset as they take a built-in.

A spec is plain data; training it (building its task and model, checking memory, calling
the engine) knows no study and is `analyses.training`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.config import from_dict, to_dict
from interp.sweep.specs import RunSpec, seed_folder
from interp.training.config import TrainConfig
from models.config import config_to_dict
from models.presets import PRESETS, plugin_preset, preset_config
from tasks import task_family, task_from_dict

if TYPE_CHECKING:
    from interp.splits import Task

DEFAULT_PRESET = "mpsp-2l2h"
_MPSP_PRESETS = ("mpsp-1l1h", "mpsp-1l2h", "mpsp-2l1h", "mpsp-2l2h")

PRESET_TASKS: dict[str, dict[str, Any]] = {
    **{name: {"name": "mpsp"} for name in _MPSP_PRESETS},
    "modadd-1l": {"name": "modadd", "p": 67},
    "quadratic-mlp": {"name": "modadd", "p": 97},
}
"""The task each preset's study trains it on (overridable field by field)."""

PRESET_TRAINING: dict[str, dict[str, Any]] = {
    **{name: {"epochs": 15000, "lr": 1e-3, "weight_decay": 0.1} for name in _MPSP_PRESETS},
    "modadd-1l": {"epochs": 15000, "lr": 1e-3, "weight_decay": 0.0, "weight_norm": 30.0},
    "quadratic-mlp": {"epochs": 20000, "lr": 1e-2, "weight_decay": 1.0, "loss": "mse", "eval_every": 10},
}
"""Each preset's study settings of `TrainConfig` (the rest are `TrainConfig`'s defaults)."""


@dataclass(frozen=True)
class Recipe:
    """A preset with its task built: what every run of one configuration shares.

    Attributes:
        preset: The model preset.
        task: The task config (preset's study task, then the caller's options).
        model: The model config as a dict (with ``kind``), sized for the task.
        train: The preset's `TrainConfig` settings (`preset_settings`).
    """

    preset: str
    task: Task
    model: dict[str, Any]
    train: Mapping[str, Any]

    def spec(
        self, out: str | Path, train: Mapping[str, Any], tags: Mapping[str, Any] | None = None
    ) -> RunSpec:
        """One run of this recipe into `out`: the preset's training settings, then `train`.

        Raises:
            ConfigError: If a training field is unknown or invalid.
        """
        fields = {**self.train, **train}
        config = to_dict(from_dict(TrainConfig, fields, where="the training options"))
        return RunSpec(Path(out), self.model, self.task.to_dict(), config, dict(tags or {}))

    def task_fields(self) -> set[str]:
        """The fields of this recipe's task family (the others are training fields)."""
        return task_fields(self.preset)


def task_fields(preset: str) -> set[str]:
    """The config fields of the task family `preset` trains on.

    Raises:
        ConfigError: On an unknown preset, or a task family that is not known here.
        PluginError: If the preset's or its task's plugin fails to import.
    """
    task, _ = preset_settings(preset)
    return {f.name for f in dataclasses.fields(task_family(task["name"], where=f"preset {preset!r}"))}


def preset_settings(preset: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task (``{"name": ..., **fields}``) and `TrainConfig` settings `preset` trains with.

    A built-in preset's come from its study (`PRESET_TASKS`, `PRESET_TRAINING`); any other name
    is a plugin's preset (`models.presets.plugin_preset`), which carries its own.

    Raises:
        ConfigError: If no preset, built-in or plugin, has that name (the valid ones listed).
        PluginError: If the preset's plugin fails to import or holds no `interp.plugins.Preset`.
    """
    if preset in PRESETS:
        return dict(PRESET_TASKS[preset]), dict(PRESET_TRAINING[preset])
    found, _ = plugin_preset(preset)
    return dict(found.task), dict(found.train)


def recipe(
    preset: str, task_options: Mapping[str, Any] | None = None, *, task_name: str | None = None
) -> Recipe:
    """Build `preset`'s task (its study task, then `task_options`) and its model config.

    Args:
        preset: A model preset, built-in or a plugin's.
        task_options: Task fields to change.
        task_name: Another task family than the preset's (its own defaults then apply).

    Raises:
        ConfigError: On an unknown preset, an unknown or invalid task field.
        PluginError: If the preset's or the task's plugin fails to import.
    """
    own, train = preset_settings(preset)
    base = own if task_name in (None, own.get("name")) else {"name": task_name}
    task = task_from_dict({**base, **(task_options or {})}, where="the task options")
    return Recipe(preset, task, config_to_dict(preset_config(preset, task)), train)


def plan_runs(
    preset: str,
    task_options: Mapping[str, Any],
    train_options: Mapping[str, Any],
    seeds: Sequence[int] | None,
    out: str | Path,
    *,
    task_name: str | None = None,
) -> list[RunSpec]:
    """The runs of `interp train`: one per seed (``out/seed_<s>``), or one into `out` if `seeds` is None.

    Each run is tagged with its preset, the task options given and its seed, so several seeds
    read as one configuration in a report.

    Raises:
        ConfigError: On any unknown or invalid option.
    """
    base = recipe(preset, task_options, task_name=task_name)
    tags = {"preset": preset, **task_options}
    if seeds is None:
        return [base.spec(out, {**train_options}, {**tags, "seed": train_options.get("seed", 0)})]
    return [base.spec(seed_folder(out, s), {**train_options, "seed": s}, {**tags, "seed": s}) for s in seeds]
