"""Weights-only copies of a run's checkpoints, small enough for a repository.

A repository keeps a long experiment's compact records (`interp.sweep.specs.export_records`);
for a run worth dissecting from a fresh clone it can also keep a log-spaced series of its
checkpoints as weights only: `model.safetensors` and a manifest per step (no optimizer or RNG
state, so they cannot be resumed from, only analysed). A study-scale `mpsp-2l2h` checkpoint
is about 0.3 MB.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from interp.errors import CheckpointError
from interp.store.checkpoint import load_checkpoint, save_checkpoint
from interp.store.layout import list_checkpoints
from interp.store.run_folder import CONFIG_FILE, checkpoint_dir


def log_spaced(steps: list[int], count: int) -> list[int]:
    """Up to `count` of `steps` (sorted), spread evenly in log(1 + step), first and last kept."""
    if count < 2:
        raise ValueError(f"count must be >= 2 (the first and the last step), got {count}")
    steps = sorted(steps)
    if len(steps) <= count:
        return steps
    ends = math.log1p(steps[0]), math.log1p(steps[-1])
    chosen: list[int] = []
    for i in range(count):
        target = ends[0] + (ends[1] - ends[0]) * i / (count - 1)
        nearest = min((s for s in steps if s not in chosen), key=lambda s: abs(math.log1p(s) - target))
        chosen.append(nearest)
    return sorted(chosen)


def dense_window(steps: list[int], window: tuple[int, int], count: int) -> list[int]:
    """Every one of `steps` inside `window` (inclusive), plus `count` log-spaced others.

    A series dense across a phase transition (e.g. every 10 epochs around phase 2) and sparse
    elsewhere, so a tutorial can follow the transition checkpoint by checkpoint at a size a
    repository can keep.
    """
    low, high = window
    inside = [s for s in steps if low <= s <= high]
    outside = [s for s in steps if s < low or s > high]
    return sorted(set(inside) | set(log_spaced(outside, count) if len(outside) >= 2 else outside))


def export_weights(
    run_dir: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    count: int = 16,
    *,
    steps: list[int] | None = None,
) -> list[int]:
    """Write weights-only copies of up to `count` log-spaced checkpoints of `run_dir` into `dest`.

    Args:
        run_dir: A run folder with checkpoints.
        dest: A run folder holding the run's `config.json` (e.g. written by `export_records`);
            its checkpoints are replaced by the chosen steps.
        count: How many checkpoints to keep (>= 2; the first and the last are always kept).
        steps: Exactly these checkpoints instead (e.g. `dense_window`'s); each must exist.

    Returns:
        The exported steps.

    Raises:
        CheckpointError: If `run_dir` has no checkpoints or `dest` has no config.json.
    """
    run_dir, dest, chosen_steps = Path(run_dir), Path(dest), steps
    steps = list_checkpoints(run_dir)
    if not steps:
        raise CheckpointError(f"{run_dir} has no checkpoints to export", "train the run first")
    if not (dest / CONFIG_FILE).is_file():
        raise CheckpointError(f"{dest} has no {CONFIG_FILE}", "export the run's records there first")
    if chosen_steps is not None:
        missing = sorted(set(chosen_steps) - set(steps))
        if missing:
            raise CheckpointError(f"{run_dir} has no checkpoint at steps {missing}", f"it has {steps}")
    chosen = sorted(chosen_steps) if chosen_steps is not None else log_spaced(steps, count)
    for step in sorted(set(list_checkpoints(dest)) - set(chosen)):
        # An earlier export's step that is no longer chosen: drop it so the series stays log-spaced.
        shutil.rmtree(checkpoint_dir(dest, step))
    for step in chosen:  # the last one saved points LATEST at the newest step
        ckpt = load_checkpoint(checkpoint_dir(run_dir, step), load_train_state=False)
        save_checkpoint(dest, step, ckpt.state_dict, train_state=None, meta=ckpt.meta)
    return chosen
