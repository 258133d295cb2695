"""Plugins: tasks, model presets and analyses from other packages, found by entry point.

A package brings its own by declaring entry points in its ``pyproject.toml``, the convention
of pytest and Sphinx::

    [project.entry-points."interp.tasks"]
    demo-sum = "interp_plugin_demo.task:DemoSumTask"      # a task class (interp.splits.Task)
    [project.entry-points."interp.presets"]
    demo-1l = "interp_plugin_demo.preset:PRESET"          # an interp.plugins.Preset
    [project.entry-points."interp.analyses"]
    demo-norms = "interp_plugin_demo.analysis:ANALYSIS"   # an analyses.base.Analysis

Every place that resolves a name (`tasks.task_from_dict`, `models.preset_config`,
`analyses.get_analysis`, and so `interp train --task`, `load_subject`, `evolve`, the analysis
commands) looks at the built-ins first, then at these. Entry points are listed from package
metadata without importing anything (`interp --help` names plugin analyses without loading
them); a plugin is imported when its name is first used. In a notebook, `tasks.register_task`
and `analyses.register_analysis` do the same for this process only (worker processes do not see
them, so `evolve --jobs` refuses them). ``INTERP_NO_PLUGINS=1`` turns entry points off.

A run trained on a plugin's task records the plugin's package and version in config.json
(``plugins``); opening it without the plugin says which package to install (`missing_plugin`).
"""

from interp.plugins.discovery import (
    DISABLE,
    GROUPS,
    Plugin,
    available,
    declared,
    enabled,
    find,
    missing_plugin,
    provenance,
    refuse_registered,
    register,
    unregister,
)
from interp.plugins.preset import Preset

__all__ = [
    "DISABLE",
    "GROUPS",
    "Plugin",
    "Preset",
    "available",
    "declared",
    "enabled",
    "find",
    "missing_plugin",
    "provenance",
    "refuse_registered",
    "register",
    "unregister",
]
