"""Runs of plugins: a plugin preset's run specs, and what worker processes cannot see.

A plugin's preset (`interp.plugins.Preset`) carries its own task and training settings, where
a built-in preset's live in `analyses.recipes`; `plan_plugin_runs` merges them in the
same order as `recipes.plan_runs` does (the task's and `TrainConfig`'s defaults, the preset's
settings, then the caller's options), so `interp train --preset PLUGIN` behaves as for a
built-in. A task or analysis registered in a notebook (`register_task`, `register_analysis`)
exists in that process only: `refuse_in_process_plugins` says so in one line before work is
sent to worker processes that would not find it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from interp.config import from_dict, to_dict
from interp.errors import PluginError
from interp.plugins import available
from interp.sweep.specs import RunSpec, seed_folder
from interp.training.config import TrainConfig
from models.config import config_to_dict
from models.presets import plugin_preset, preset_config
from tasks import TASKS, task_from_dict

__all__ = ["plan_plugin_runs", "refuse_in_process_plugins"]


def plan_plugin_runs(
    preset: str,
    task_options: Mapping[str, Any],
    train_options: Mapping[str, Any],
    seeds: Sequence[int] | None,
    out: str | Path,
    *,
    task_name: str | None = None,
) -> list[RunSpec]:
    """The runs of ``interp train --preset PLUGIN``: one per seed (``out/seed_<s>``), or one into `out`.

    Raises:
        ConfigError: On an unknown preset, task or option.
        PluginError: If the preset's (or the task's) plugin fails to import.
    """
    found, _ = plugin_preset(preset)
    own = dict(found.task)
    base = own if task_name in (None, own.get("name")) else {"name": task_name}
    task = task_from_dict({**base, **task_options}, where="the task options")
    model = config_to_dict(preset_config(preset, task))
    tags = {"preset": preset, **task_options}

    def spec(folder: str | Path, train: Mapping[str, Any], seed: int) -> RunSpec:
        fields = to_dict(from_dict(TrainConfig, {**found.train, **train}, where="the training options"))
        return RunSpec(Path(folder), model, task.to_dict(), fields, {**tags, "seed": seed})

    if seeds is None:
        return [spec(out, train_options, train_options.get("seed", 0))]
    return [spec(seed_folder(out, s), {**train_options, "seed": s}, s) for s in seeds]


def refuse_in_process_plugins(analysis: str | None, task: str | None, what: str) -> None:
    """Refuse `what` (work for worker processes) if `analysis` or `task` was registered in this
    process only (`register_analysis`, `register_task`): a worker would not know the name.

    Raises:
        PluginError: Naming the name and what to do instead.
    """
    from analyses.registry import REGISTRY

    for group, name, builtins in (("interp.analyses", analysis, REGISTRY), ("interp.tasks", task, TASKS)):
        plugin = available(group, builtins).get(name) if name else None
        if plugin is not None and plugin.in_process:
            raise PluginError(
                f"{what} needs worker processes, which do not see the {name!r} registered in this process "
                f"({plugin.target})",
                "compute it here (jobs=1), or declare it as an entry point of an installed package",
            )
