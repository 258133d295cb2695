"""The old path of `interp.training.finetuning`, for callers not yet moved to the new one.

The module was renamed because a module named like its public function hid the function
(after ``import interp.training.finetune``, ``interp.training.finetune`` was the module). The
last callers of this path are being split on branch issue-46-b, which is why it stays: delete
this file when that merge updates their imports (the architecture test lists it as its one
exception for that reason).
"""

from __future__ import annotations

from typing import Any

from interp.training import finetuning


def finetune(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """`interp.training.finetuning.finetune`, under its old path."""
    return finetuning.finetune(*args, **kwargs)


def trainable_norm(*args: Any, **kwargs: Any) -> float:
    """`interp.training.finetuning.trainable_norm`, under its old path."""
    return finetuning.trainable_norm(*args, **kwargs)
