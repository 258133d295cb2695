"""Stages of training: boundaries found in any series over checkpoints (the LLC, circuit measures,
accuracies), by critical points of a smoothed curve, change points (ruptures), or the onset
rule of `interp.metrics.find_rise`. Importing this package imports nothing heavy.
"""

from interp.lazy import lazy_surface

_LAZY = {
    "find_stages": "interp.stages.boundaries",
    "Stages": "interp.stages.boundaries",
    "stages_figure": "interp.stages.drawing",
}
__getattr__, __dir__ = lazy_surface(__name__, _LAZY)
__all__ = sorted(_LAZY)
