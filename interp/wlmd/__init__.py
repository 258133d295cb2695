"""Wang-Landau molecular dynamics on the weight sphere (study B's equilibrium models).

Importing this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    **{
        name: "interp.wlmd.sampler"
        for name in ("WLMDConfig", "Sampler", "ModelCVs", "wlmd_run", "wlmd_produce", "walk_record")
    },
    **{
        name: "interp.wlmd.grid"
        for name in ("GridSpec", "Schedule", "OutOfGrid", "deposit", "interpolate", "flatness")
    },
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
