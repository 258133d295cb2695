"""Training engines that write run folders: the loop, vectorised seeds, fine-tuning, schedules.

Importing this package imports no torch; each name loads its module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    "TrainConfig": "interp.training.config",
    "finetune_config": "interp.training.config",
    "LOSSES": "interp.training.config",
    "train": "interp.training.loop",
    "TrainLoop": "interp.training.loop",
    "run_config": "interp.training.loop",
    "training_forward": "interp.training.loop",
    "project_to_sphere": "interp.training.loop",
    "stop_on_signals": "interp.training.loop",
    "train_vectorized": "interp.training.vectorized",
    "finetune": "interp.training.finetuning",
    "schedule": "interp.training.eval_steps",
    "cpu_bf16": "interp.training.precision",
    "check_bf16": "interp.training.precision",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
