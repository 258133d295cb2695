"""Named experiments over runs and checkpoints: each is `Params -> compute -> Result`.

`analyses.registry.REGISTRY` is the one list of built-ins; `get_analysis(name)` imports an
entry (or a plugin's, `interp.plugins`; `register_analysis` adds a notebook's own) and
`all_analyses()` returns the built-ins. `load_subject(path)` opens a run or checkpoint folder for
any of them::

    from analyses import get_analysis, load_subject
    patch = get_analysis("patch")
    result = patch.compute(load_subject("runs/x"), patch.params(split="adv"))
    result.figure()

This package's `__init__` stays free of torch imports (the CLI reads the registry to list its
commands, and `interp --help` must start fast); heavy modules load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from analyses.registry import REGISTRY
from interp.errors import ConfigError, PluginError, did_you_mean
from interp.lazy import lazy_surface
from interp.plugins import Plugin, available, find, register

if TYPE_CHECKING:
    from analyses.base import Analysis


def get_analysis(name: str) -> Analysis:
    """Return the analysis `name`: a built-in, one registered here, or a plugin's (`interp.plugins`).

    Raises:
        ConfigError: If there is none of that name (the valid names listed).
        PluginError: If its plugin fails to import or holds no `Analysis` named `name`.
    """
    if name in REGISTRY:
        return importlib.import_module(REGISTRY[name][0]).ANALYSIS
    found = find(_GROUP, name, REGISTRY, lambda obj: _not_an_analysis(obj, name))
    if found is None:
        raise ConfigError(f"unknown analysis {name!r}", did_you_mean(name, analysis_names()))
    return found[0]


def all_analyses() -> list[Analysis]:
    """Every built-in analysis, in registry order."""
    return [get_analysis(name) for name in REGISTRY]


def analysis_names() -> list[str]:
    """The built-in analyses, then the registered and the plugins' (none imported: torch-free)."""
    return [*REGISTRY, *plugin_analyses()]


def plugin_analyses() -> dict[str, Plugin]:
    """The plugin analyses by name, with where each comes from (none imported)."""
    return available(_GROUP, REGISTRY)


def register_analysis(analysis: Analysis) -> Analysis:
    """Make `analysis` usable by its name in this process (`get_analysis`, `evolve`, `load` of
    its results), as a notebook's own analysis. Worker processes do not see it
    (``evolve(..., jobs=2)`` refuses it); for those, declare an ``interp.analyses`` entry point.

    Raises:
        PluginError: If it is not an `Analysis`, or its name is a built-in's or an installed plugin's.
    """
    problem = _not_an_analysis(analysis, getattr(analysis, "name", None))
    if problem:
        raise PluginError(f"register_analysis: the object {problem}")
    register(_GROUP, analysis.name, analysis, REGISTRY)
    return analysis


def _not_an_analysis(obj: object, name: str | None) -> str | None:
    from analyses.base import Analysis

    if not isinstance(obj, Analysis):
        return f"is a {type(obj).__name__}, not an analyses.base.Analysis"
    if obj.name != name:
        return f"is the analysis {obj.name!r}, not {name!r} (the name it is registered under)"
    return None


_GROUP = "interp.analyses"


# These import models and tasks (hence torch) only when first used.
_LAZY = {
    "load_subject": "analyses.subject",
    "Subject": "analyses.subject",
    "evolve": "analyses.evolution",
    "Evolution": "analyses.evolution",
    "Result": "analyses.base",
    "Analysis": "analyses.base",
    "import_checkpoint": "analyses.importing",
    "import_series": "analyses.series_import",
}
__getattr__, __dir__ = lazy_surface(__name__, _LAZY)

__all__ = [
    "REGISTRY",
    "all_analyses",
    "analysis_names",
    "get_analysis",
    "plugin_analyses",
    "register_analysis",
    *sorted(_LAZY),
]
