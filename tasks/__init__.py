"""Tasks: the data of the three studies, as frozen configs with deterministic split builders.

- `MPSPTask` (study A): sum mod m with a spurious max / first-element shortcut, exact ratio r;
  `counterfactual` builds label- or shortcut-flipping partners for activation patching.
- `ModAddTask` (studies B and C): ``x + y mod p`` with nested label corruption.
- `NoiseInjectionTask` (study B): modular addition plus a noise set on new tokens.

Each task satisfies `interp.splits.Task`. `TASKS` is the one registry of built-in task
families; other packages add theirs by an ``interp.tasks`` entry point, a notebook by
`register_task` (`tasks.families`, `interp.plugins`). `task_from_dict` rebuilds a task from its
`to_dict()` form, strictly, whichever it is. The configs import no torch (the CLI checks them
before the heavy imports); building splits does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from interp.config import from_dict
from interp.errors import ConfigError, did_you_mean
from interp.lazy import lazy_surface
from tasks.families import TASKS, register_task, task_families, task_family
from tasks.modular import ModAddTask
from tasks.mpsp import MPSPTask
from tasks.noise import NoiseInjectionTask

if TYPE_CHECKING:
    from interp.splits import Task


def task_from_dict(
    data: Mapping[str, Any], *, where: str | None = None, plugins: Mapping[str, Any] | None = None
) -> Task:
    """Rebuild a task from ``{"name": ..., **fields}`` (the form `to_dict` returns).

    Args:
        data: The task's name and fields.
        where: Where the data came from, for error messages (e.g. a file path).
        plugins: The ``plugins`` record of the run's config.json, if any: an unknown task that
            a plugin gave then says which package to install.

    Returns:
        The task config.

    Raises:
        ConfigError: On a missing or unknown name, an unknown field or an invalid value.
        PluginError: If the task's plugin fails to import, or the run's plugin is not installed.
    """
    origin = f" in {where}" if where else ""
    if not isinstance(data, Mapping) or "name" not in data:
        raise ConfigError(f"a task config needs a 'name' key{origin}", did_you_mean("", TASKS))
    family = task_family(str(data["name"]), where=where, plugins=plugins)
    fields = {k: v for k, v in data.items() if k != "name"}
    return from_dict(family, fields, where=where)


__getattr__, __dir__ = lazy_surface(__name__, {"counterfactual": "tasks.counterfactuals"})

__all__ = [
    "TASKS",
    "MPSPTask",
    "ModAddTask",
    "NoiseInjectionTask",
    "counterfactual",
    "register_task",
    "task_families",
    "task_family",
    "task_from_dict",
]
