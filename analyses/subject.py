"""The subject of an analysis: a model, its task and splits, and where it came from.

Analyses take a `Subject` rather than a bare model so that every split a run was trained and
evaluated on (`train`, `val`, `adv`, ...) and its group masks are at hand, and so a result can
say which checkpoint it measured. Build one from a run or checkpoint folder with
`load_subject`, or directly from objects in a notebook.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from interp.errors import CheckpointError, ConfigError, did_you_mean
from interp.splits import Split, Task, split_digests
from interp.store import checkpoint_dir
from interp.store.checkpoint import Checkpoint, load_checkpoint, load_state_into
from models import build_model, load_model
from models.config import config_from_dict
from tasks import task_from_dict


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


def load_subject(path: str | Path) -> Subject:
    """Load the model of a checkpoint folder (or a run folder's latest) with its task's splits.

    The splits are rebuilt from the run's task config and data seed, then checked against the
    fingerprints stored in the checkpoint, so an analysis never runs on data that differs
    from what the model was trained on.

    Raises:
        CheckpointError: If the checkpoint is missing or damaged, or the data does not match.
    """
    model, ckpt = load_model(path)
    task = task_from_dict(ckpt.config["task"], where=str(ckpt.run_dir / "config.json"))
    splits = task.splits(ckpt.config["train"]["data_seed"])
    return _subject(model, ckpt, task, splits, split_digests(splits))


def subject_series(run_dir: str | Path, steps: Iterable[int]) -> Iterator[Subject]:
    """The subjects of a run's checkpoints `steps`, one at a time, as `load_subject` gives them.

    The task's splits (and their digests) are built once, and one model is built once and takes
    each checkpoint's weights in turn, so a series costs one load per checkpoint and holds one
    model in memory. A yielded subject is valid until the next one is produced (its model's
    weights are replaced then): use it before advancing.

    Raises:
        CheckpointError: If a checkpoint is missing or damaged, or the data does not match.
    """
    model = task = splits = digests = None
    for step in steps:
        ckpt = load_checkpoint(checkpoint_dir(run_dir, step), load_train_state=False)
        where = str(ckpt.run_dir / "config.json")
        if model is None:
            model = build_model(config_from_dict(ckpt.config["model"], where=where))
            task = task_from_dict(ckpt.config["task"], where=where)
            splits = task.splits(ckpt.config["train"]["data_seed"])
            digests = split_digests(splits)
        # New tensors, not copies into the old ones: a result that kept a view of the previous
        # checkpoint's weights keeps their values.
        load_state_into(model, ckpt.state_dict, where=str(ckpt.path), assign=True)
        yield _subject(model.eval(), ckpt, task, splits, digests)


def _subject(
    model: nn.Module, ckpt: Checkpoint, task: Task, splits: Mapping[str, Split], digests: dict[str, str]
) -> Subject:
    stored = ckpt.meta.get("fingerprints")
    if stored is not None and stored != digests:
        raise CheckpointError(
            f"the data rebuilt for {ckpt.path} differs from what it was trained on",
            "the task code changed since the run; analyse it with the interp version in its config.json",
        )
    return Subject(
        model=model,
        task=task,
        splits=splits,
        step=ckpt.step,
        source=str(ckpt.path),
        loss=ckpt.config["train"].get("loss", "cross_entropy"),
    )
