"""The task families by name: the built-ins (`TASKS`), then plugins' (`interp.plugins`).

`task_family(name)` is the one lookup every name goes through (`task_from_dict`, and so
`interp train --task`, `load_subject`, `evolve`, `interp import`): a built-in first, then a task
registered in this process (`register_task`), then an installed package's ``interp.tasks``
entry point, imported on first use. A run's ``plugins`` record (config.json) turns "unknown
task" into which package to install.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from interp.errors import ConfigError, did_you_mean, note
from interp.plugins import available, find, missing_plugin, register
from tasks.modular import ModAddTask
from tasks.mpsp import MPSPTask
from tasks.noise import NoiseInjectionTask

GROUP = "interp.tasks"

TASKS: dict[str, type] = {cls.name: cls for cls in (MPSPTask, ModAddTask, NoiseInjectionTask)}
"""Built-in task families by registry name (docs and the CLI page list these only)."""


def task_family(name: str, *, where: str | None = None, plugins: Mapping[str, Any] | None = None) -> type:
    """The task class registered as `name`: a built-in, a registered one, or a plugin's.

    Args:
        name: The task family's name (``task.name``).
        where: Where the name came from, for messages.
        plugins: A run config's ``plugins`` record (says which package gave `name`).

    Raises:
        ConfigError: If no task has that name (the valid ones listed).
        PluginError: If its plugin fails to import or is not a task, or the run's plugin is
            not installed (naming the package to install).
    """
    if name in TASKS:
        return TASKS[name]
    found = find(GROUP, name, TASKS, lambda obj: _not_a_task(obj, name))
    if found is not None:
        return found[0]
    record = (plugins or {}).get(GROUP, {}).get(name) if isinstance(plugins, Mapping) else None
    error = missing_plugin(GROUP, name, record)
    if error is not None:
        raise error
    origin = f" in {where}" if where else ""
    raise ConfigError(
        f"unknown task {name!r}{origin}", did_you_mean(name, [*TASKS, *available(GROUP, TASKS)])
    )


def task_families() -> dict[str, type]:
    """Every task family that can be used now: the built-ins, then every plugin's (imported).

    A plugin that fails to import is left out with a note (using its name says why, in full).
    """
    families = dict(TASKS)
    for name in available(GROUP, TASKS):
        try:
            families[name] = task_family(name)
        except ConfigError as err:
            note(str(err))
    return families


def register_task(cls: type) -> type:
    """Make the task class `cls` usable by its ``name`` in this process (a notebook's task).

    Usable as a class decorator. Worker processes do not see it: train such a task in this
    process (`interp.training.train`), not through a sweep.

    Raises:
        PluginError: If `cls` is not a task class, or its name is a built-in's or an installed
            plugin's.
    """
    name = getattr(cls, "name", None)
    problem = _not_a_task(cls, name)
    if problem:
        from interp.errors import PluginError

        raise PluginError(f"register_task({getattr(cls, '__name__', cls)!r}): it {problem}")
    register(GROUP, name, cls, TASKS)
    return cls


def _not_a_task(obj: Any, name: str | None) -> str | None:
    """What keeps `obj` from being the task family `name` (None: nothing)."""
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        return "is not a task class (a frozen dataclass with name, splits and to_dict)"
    if not isinstance(getattr(obj, "name", None), str) or obj.name != name:
        return f"has name {getattr(obj, 'name', None)!r}, not {name!r} (the name it is registered under)"
    missing = [a for a in ("splits", "to_dict", "d_vocab", "d_vocab_out", "n_ctx") if not hasattr(obj, a)]
    if missing:
        return f"is not an interp.splits.Task: it lacks {', '.join(missing)}"
    return None
