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

from interp.errors import CheckpointError, ConfigError, did_you_mean, note
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
        digests: ``{split name: digest}`` stored in the checkpoint (what the model was trained
            on); `split` refuses a split whose digest differs. None: nothing to check against.
        force_data: Analyse splits whose digest differs anyway (a note says so).
    """

    model: nn.Module
    task: Task
    splits: Mapping[str, Split]
    step: int | None = None
    source: str | None = None
    loss: str = "cross_entropy"
    digests: Mapping[str, str] | None = None
    force_data: bool = False
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


def check_digest(name: str, found: str, stored: str, source: str | None, *, force: bool) -> None:
    """Refuse (or with `force`, note) a split whose digest `found` differs from the `stored` one.

    Raises:
        CheckpointError: Naming the split, both digests and the checkpoint, unless `force`.
    """
    if found == stored:
        return
    where = source or "the checkpoint"
    message = (
        f"split {name!r} has digest {found}, but {where} was trained on split {name!r} with digest "
        f"{stored}: the data differ (the task code, data seed or config changed)"
    )
    if not force:
        raise CheckpointError(
            message, "analyse the run's own data, or pass force_data=True (CLI: --force-data)"
        )
    note(message + "; analysed anyway (forced)")


def load_subject(path: str | Path, *, force_data: bool = False, allow_nonfinite: bool = False) -> Subject:
    """Load the model of a checkpoint folder (or a run folder's latest) with its task's splits.

    The splits are rebuilt from the run's task config and data seed, then checked against the
    digests stored in the checkpoint, so an analysis never runs on data that differs from what
    the model was trained on.

    Args:
        path: A checkpoint folder, or a run folder (its LATEST).
        force_data: Analyse even if a rebuilt split's digest differs (a note names both).
        allow_nonfinite: Load weights holding NaN or inf (refused by default).

    Raises:
        CheckpointError: If the checkpoint is missing, damaged or not finite, or the data does
            not match (naming the split and both digests).
    """
    model, ckpt = load_model(path, allow_nonfinite=allow_nonfinite)
    where = str(ckpt.run_dir / "config.json")
    task = task_from_dict(ckpt.config["task"], where=where)
    splits = task.splits(ckpt.config["train"]["data_seed"])
    return _subject(model, ckpt, task, splits, split_digests(splits), force_data=force_data)


def subject_series(
    run_dir: str | Path, steps: Iterable[int], *, force_data: bool = False, allow_nonfinite: bool = False
) -> Iterator[Subject]:
    """The subjects of a run's checkpoints `steps`, one at a time, as `load_subject` gives them.

    The task's splits (and their digests) are built once, and one model is built once and takes
    each checkpoint's weights in turn, so a series costs one load per checkpoint and holds one
    model in memory. A yielded subject is valid until the next one is produced (its model's
    weights are replaced then): use it before advancing.

    Raises:
        CheckpointError: If a checkpoint is missing, damaged or not finite, or the data does not match.
    """
    model = task = splits = digests = None
    for step in steps:
        ckpt = load_checkpoint(
            checkpoint_dir(run_dir, step), load_train_state=False, allow_nonfinite=allow_nonfinite
        )
        where = str(ckpt.run_dir / "config.json")
        if model is None:
            model = build_model(config_from_dict(ckpt.config["model"], where=where))
            task = task_from_dict(ckpt.config["task"], where=where)
            splits = task.splits(ckpt.config["train"]["data_seed"])
            digests = split_digests(splits)
        # New tensors, not copies into the old ones: a result that kept a view of the previous
        # checkpoint's weights keeps their values.
        load_state_into(model, ckpt.state_dict, where=str(ckpt.path), assign=True)
        yield _subject(model.eval(), ckpt, task, splits, digests, force_data=force_data)


def _subject(
    model: nn.Module,
    ckpt: Checkpoint,
    task: Task,
    splits: Mapping[str, Split],
    rebuilt: dict[str, str],
    *,
    force_data: bool,
) -> Subject:
    """A subject of `ckpt`'s model, its splits checked against the digests it stored."""
    stored = ckpt.meta.get("fingerprints")
    if stored is not None:
        for name in sorted(set(stored) | set(rebuilt)):
            if name not in rebuilt or name not in stored:
                message = (
                    f"{ckpt.path} was trained on splits {sorted(stored)}, "
                    f"but the task now builds {sorted(rebuilt)}"
                )
                if not force_data:
                    raise CheckpointError(
                        message, "pass force_data=True (CLI: --force-data) to analyse anyway"
                    )
                note(message)
                continue
            check_digest(name, rebuilt[name], stored[name], str(ckpt.path), force=force_data)
    return Subject(
        model=model,
        task=task,
        splits=splits,
        step=ckpt.step,
        source=str(ckpt.path),
        loss=ckpt.config["train"].get("loss", "cross_entropy"),
        digests=stored,
        force_data=force_data,
    )
