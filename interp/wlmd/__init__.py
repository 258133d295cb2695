"""Wang-Landau molecular dynamics on the weight sphere: models sampled flat in two collective
variables (the sampler, the collective variables, walks into run folders).

Importing this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    **{name: "interp.wlmd.sampler" for name in ("WLMDConfig", "Sampler", "walk_record")},
    "ModelCVs": "interp.wlmd.cvs",
    **{name: "interp.wlmd.runs" for name in ("wlmd_run", "wlmd_produce")},
    **{
        name: "interp.wlmd.grid"
        for name in ("GridSpec", "Schedule", "OutOfGrid", "deposit", "interpolate", "flatness")
    },
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
