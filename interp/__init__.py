"""`interp`: a toolkit for the mechanistic interpretability of small models.

One import for notebooks: ``import interp`` gives the everyday names of every subpackage
(`interp.train`, `interp.TrainConfig`, `interp.open_run`, `interp.load_checkpoint`,
`interp.read_metrics`, `interp.patch_sweep`, ...). Nothing heavy is
imported until a name is first used, so `interp --help` starts in well under a second. The
concepts live in subpackages (`interp.store`, `interp.training`, `interp.dissect`,
`interp.wlmd`, `interp.sweep`, `interp.cli`); `docs/architecture.md` draws the layout.
Models, tasks and analyses are sibling packages (`models`, `tasks`, `analyses`).
"""

from interp.lazy import lazy_surface

__version__ = "0.1.0"

_SUBPACKAGES = ("interp.store", "interp.training", "interp.dissect", "interp.wlmd", "interp.sweep", "interp.stages")
_OWN = {
    "Split": "interp.splits",
    "Task": "interp.splits",
    "split_digests": "interp.splits",
    "evaluate": "interp.metrics",
    "milestones": "interp.metrics",
    "find_rise": "interp.metrics",
    "per_example_loss": "interp.metrics",
    "format_table": "interp.text",
    "splits_table": "interp.text",
    "model_summary": "interp.text",
    "InterpError": "interp.errors",
    "ConfigError": "interp.errors",
    "CheckpointError": "interp.errors",
    "from_dict": "interp.config",
    "to_dict": "interp.config",
    "param": "interp.config",
}


def _surface() -> dict[str, str]:
    """Every subpackage's public names (its ``__all__``), mapped to the subpackage."""
    import importlib

    names = dict(_OWN)
    for package in _SUBPACKAGES:
        names |= {name: package for name in importlib.import_module(package).__all__}
    return names


__getattr__, __dir__ = lazy_surface(__name__, _surface())
__all__ = sorted(_surface())
