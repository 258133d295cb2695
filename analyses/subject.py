"""The subject of an analysis: a model, its task and splits, and where it came from.

Analyses take a `Subject` rather than a bare model so that every split a run was trained and
evaluated on (`train`, `val`, `adv`, ...) and its group masks are at hand, and so a result can
say which checkpoint it measured. Build one from a run or checkpoint folder with
`load_subject`, or directly from objects in a notebook.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from interp.errors import ConfigError, did_you_mean
from interp.splits import Split, Task, split_digests
from interp.store.checkpoint import Checkpoint
from interp.store.handle import DIGESTS_KEY, RunHandle, check_digest, check_digests
from models import load_model, model_from_checkpoint
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
        digests: ``{split name: digest}`` stored in the checkpoint (what the model was trained
            on); `split` refuses a split whose digest differs. None: nothing to check against.
        force_data: Analyse splits whose digest differs anyway (a note says so).
        run: The run it came from, opened once (`interp.store.handle.RunHandle`), if it came from one:
            its config, its other checkpoints, its result folders.
    """

    model: nn.Module
    task: Task
    splits: Mapping[str, Split]
    step: int | None = None
    source: str | None = None
    loss: str = "cross_entropy"
    digests: Mapping[str, str] | None = None
    force_data: bool = False
    run: RunHandle | None = field(default=None, repr=False, compare=False)
    _checked: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def split(self, name: str) -> Split:
        """Return the split `name`, checked against the checkpoint's digest of it.

        Raises:
            ConfigError: If `name` is not a split (listing the valid names).
            CheckpointError: If the split's digest differs from the one stored in the checkpoint
                (naming both), unless `force_data`.
        """
        if name not in self.splits:
            raise ConfigError(f"split {name!r} is not a split of this run", did_you_mean(name, self.splits))
        split = self.splits[name]
        stored = (self.digests or {}).get(name)
        if stored is not None and self._checked.get(name) != stored:
            check_digest(name, split.digest(), stored, self.source, force=self.force_data)
            self._checked[name] = stored
        return split


def load_subject(
    path: str | Path | RunHandle,
    step: int | None = None,
    *,
    force_data: bool = False,
    allow_nonfinite: bool = False,
) -> Subject:
    """Load the model of a checkpoint folder (or a run folder's checkpoint) with its task's splits.

    The splits are rebuilt from the run's task config and data seed, then checked against the
    digests stored in the checkpoint, so an analysis never runs on data that differs from what
    the model was trained on.

    Args:
        path: A checkpoint folder, a run folder, or a run opened with `interp.store.handle.RunHandle`
            (its config is not read again).
        step: The checkpoint's step; None: the checkpoint folder given, or the run's LATEST.
        force_data: Analyse even if a rebuilt split's digest differs (a note names both).
        allow_nonfinite: Load weights holding NaN or inf (refused by default).

    Raises:
        CheckpointError: If the checkpoint is missing, damaged or not finite, or the data does
            not match (naming the split and both digests).
    """
    run = RunHandle.open(path)
    model, ckpt = load_model(run, step, allow_nonfinite=allow_nonfinite)
    task, splits, digests = _data(run)
    return _subject(model, ckpt, run, task, splits, digests, force_data=force_data)


def subject_series(
    run: str | Path | RunHandle,
    steps: Iterable[int],
    *,
    force_data: bool = False,
    allow_nonfinite: bool = False,
) -> Iterator[Subject]:
    """The subjects of a run's checkpoints `steps`, one at a time, as `load_subject` gives them.

    The run's config is read once, the task's splits (and their digests) are built once, and one
    model is built once and takes each checkpoint's weights in turn, so a series costs one load
    per checkpoint and holds one model in memory. A yielded subject is valid until the next one
    is produced (its model's weights are replaced then): use it before advancing.

    Args:
        run: A run folder, or a run opened with `interp.store.handle.RunHandle`.
        steps: Checkpoint steps, in the order wanted.
        force_data: As in `load_subject`.
        allow_nonfinite: As in `load_subject`.

    Raises:
        CheckpointError: If a checkpoint is missing, damaged or not finite, or the data does not match.
    """
    run = RunHandle.open(run)
    model = data = None
    for step in steps:
        ckpt = run.load_checkpoint(step, allow_nonfinite=allow_nonfinite)
        model = model_from_checkpoint(ckpt, model)
        data = data or _data(run)
        yield _subject(model, ckpt, run, *data, force_data=force_data)


def _data(run: RunHandle) -> tuple[Task, dict[str, Split], dict[str, str]]:
    """The task of `run`'s config, its splits for the run's data seed, and their digests."""
    task = task_from_dict(run.config["task"], where=str(run.config_path), plugins=run.config.get("plugins"))
    splits = task.splits(run.config["train"]["data_seed"])
    return task, splits, split_digests(splits)


def _subject(
    model: nn.Module,
    ckpt: Checkpoint,
    run: RunHandle,
    task: Task,
    splits: Mapping[str, Split],
    rebuilt: dict[str, str],
    *,
    force_data: bool,
) -> Subject:
    """A subject of `ckpt`'s model, its splits checked against the digests it stored."""
    stored = ckpt.meta.get(DIGESTS_KEY)
    if stored is not None:
        check_digests(stored, rebuilt, ckpt.path, force=force_data)
    return Subject(
        model=model,
        task=task,
        splits=splits,
        step=ckpt.step,
        source=str(ckpt.path),
        loss=ckpt.config["train"].get("loss", "cross_entropy"),
        digests=stored,
        force_data=force_data,
        run=run,
    )
