"""Named experiments over runs and checkpoints: each is `Params -> compute -> Result`.

`analyses.registry.REGISTRY` is the one list; `get_analysis(name)` imports an entry and
`all_analyses()` returns them all. `load_subject(path)` opens a run or checkpoint folder for
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
from interp.errors import ConfigError, did_you_mean
from interp.lazy import lazy_surface

if TYPE_CHECKING:
    from analyses.base import Analysis


def get_analysis(name: str) -> Analysis:
    """Return the registered analysis `name` (raises ConfigError with the valid names)."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown analysis {name!r}", did_you_mean(name, REGISTRY))
    return importlib.import_module(REGISTRY[name][0]).ANALYSIS


def all_analyses() -> list[Analysis]:
    """Every registered analysis, in registry order."""
    return [get_analysis(name) for name in REGISTRY]


# These import models and tasks (hence torch) only when first used.
_LAZY = {
    "load_subject": "analyses.subject",
    "Subject": "analyses.subject",
    "evolve": "analyses.evolution",
    "Evolution": "analyses.evolution",
    "Result": "analyses.base",
    "Analysis": "analyses.base",
}
__getattr__, __dir__ = lazy_surface(__name__, _LAZY)

__all__ = ["REGISTRY", "all_analyses", "get_analysis", *sorted(_LAZY)]
