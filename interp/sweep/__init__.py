"""Many runs: run specs, derived seeds, sweep folders and the executors that train them.

Importing this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    **{
        name: "interp.sweep.specs"
        for name in (
            "RunSpec",
            "derive_seed",
            "seed_folder",
            "seed_folders",
            "read_sweep",
            "run_sweep",
            "write_sweep",
        )
    },
    **{name: "interp.sweep.executors" for name in ("Executor", "LocalExecutor", "SubmititExecutor")},
    "Outcome": "interp.sweep.outcome",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
