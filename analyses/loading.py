"""Open a run or checkpoint folder as an analysis `Subject` (model + task + splits)."""

from __future__ import annotations

from pathlib import Path

from interp.data import fingerprints
from interp.errors import CheckpointError
from interp.subject import Subject
from models import load_model
from tasks import task_from_dict


def load_subject(path: str | Path) -> Subject:
    """Load the model of a checkpoint folder (or a run folder's latest) with its task's splits.

    The splits are rebuilt from the run's task config and data seed, then checked against the
    fingerprints stored in the checkpoint, so an analysis never runs on data that differs
    from what the model was trained on.

    Raises:
        CheckpointError: If the checkpoint is missing or damaged, or the data does not match.
    """
    model, ckpt = load_model(path)
    where = str(ckpt.run_dir / "config.json")
    task = task_from_dict(ckpt.config["task"], where=where)
    splits = task.splits(ckpt.config["train"]["data_seed"])
    stored = ckpt.meta.get("fingerprints")
    if stored is not None and stored != fingerprints(splits):
        raise CheckpointError(
            f"the data rebuilt for {ckpt.path} differs from what it was trained on",
            "the task code changed since the run; analyse it with the interp version in its config.json",
        )
    return Subject(
        model=model, task=task, splits=splits, step=ckpt.step, source=str(ckpt.path),
        loss=ckpt.config["train"].get("loss", "cross_entropy"),
    )
