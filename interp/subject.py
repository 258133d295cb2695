"""The subject of an analysis: a model, its task and splits, and where it came from.

Analyses take a `Subject` rather than a bare model so that every split a run was trained and
evaluated on (`train`, `val`, `adv`, ...) and its group masks are at hand, and so a result can
say which checkpoint it measured. Build one from a run or checkpoint folder with
`analyses.load_subject`, or directly from objects in a notebook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import nn

from interp.data import Split, Task
from interp.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class Subject:
    """A model to dissect, with its data.

    Attributes:
        model: A hooked model (`run_with_hooks`, `run_with_cache`, `hooks()`, `readout`).
        task: The task it was trained on.
        splits: The task's splits for the run's data seed.
        step: The training step of the checkpoint, if it came from one.
        source: The checkpoint folder, if it came from one.
        loss: The loss the model was trained with (``"cross_entropy"`` or ``"mse"``).
    """

    model: nn.Module
    task: Task
    splits: Mapping[str, Split]
    step: int | None = None
    source: str | None = None
    loss: str = "cross_entropy"

    def split(self, name: str) -> Split:
        """Return the split `name`, or raise a ConfigError listing the valid names."""
        if name not in self.splits:
            raise ConfigError(f"split {name!r} is not a split of this run", did_you_mean(name, self.splits))
        return self.splits[name]
