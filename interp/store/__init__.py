"""The on-disk run format: crash-safe writes, run folders, checkpoints, a run's life cycle (the
write side, `open_run`) and a run opened for reading (`RunHandle`).

Importing this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    "open_run": "interp.store.session",
    "RunSession": "interp.store.session",
    "RunHandle": "interp.store.handle",
    "read_run": "interp.store.handle",
    "Checkpoint": "interp.store.checkpoint",
    "load_checkpoint": "interp.store.checkpoint",
    "save_checkpoint": "interp.store.checkpoint",
    "list_checkpoints": "interp.store.layout",
    "resolve_checkpoint": "interp.store.layout",
    "export_run": "interp.store.export",
    "export_weights": "interp.store.export",
    "checkpoint_dir": "interp.store.layout",
    "checkpoint_name": "interp.store.layout",
    "run_of": "interp.store.layout",
    "read_config": "interp.store.run_folder",
    "read_metrics": "interp.store.run_folder",
    "read_done": "interp.store.run_folder",
    "is_done": "interp.store.run_folder",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
