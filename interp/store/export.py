"""A run copied out of its folder: its compact record, a resumable copy, weights-only series.

`RUN_RECORDS` is the one definition of a run's compact record (its config, every evaluation,
its summary and its CPU time; no weights), and `export_run(run, dest)` the one way to copy it:
a sweep's records (`interp.sweep.specs.export_records`) and a study's own exports are built on
it. ``export_run(run, dest, weights=True)`` adds the run's newest checkpoint whole and its
session log, a copy that resumes elsewhere (a long walk carried across machines).

For a run worth dissecting from a fresh clone, a repository can also keep a log-spaced series
of its checkpoints as weights only (`export_weights`): `model.safetensors` and a manifest per
step (no optimizer or RNG state, so they cannot be resumed from, only analysed). A study-scale
`mpsp-2l2h` checkpoint is about 0.3 MB.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from interp.errors import CheckpointError
from interp.store.layout import CHECKPOINTS_DIR, CONFIG_FILE, LATEST_FILE, checkpoint_dir, list_checkpoints
from interp.store.run_folder import COMPUTE_FILE, DONE_FILE, METRICS_FILE, SESSIONS_FILE, run_machines

RUN_RECORDS = (CONFIG_FILE, METRICS_FILE, DONE_FILE, COMPUTE_FILE)
"""What a run's compact record holds: its configs, every evaluation, its summary and its CPU time
with the machines it ran on (no weights, no session log): what a repository keeps of a run, a few kB."""


def export_run(run: str | os.PathLike[str], dest: str | os.PathLike[str], weights: bool = False) -> Path:
    """Copy `run`'s compact record (`RUN_RECORDS`) into the folder `dest`.

    `dest` becomes the record of the run as it is now: a record file the run does not have
    (DONE, while it trains) is removed from `dest` if an earlier export left one there. Hidden
    files (the lock, temporary files) are never copied.

    Args:
        run: A run folder.
        dest: The copy's folder (created if absent).
        weights: Also copy the run's newest checkpoint whole (weights, optimizer and RNG state,
            manifest), with LATEST naming it, and its session log: a copy that resumes. The
            checkpoint is copied before the records, so records written while it is copied are
            cut back to its step on resume.

    Returns:
        `dest`.

    Raises:
        CheckpointError: With `weights`, if `run` has no checkpoint.
    """
    run, dest = Path(run), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    names = RUN_RECORDS
    if weights:
        steps = list_checkpoints(run)
        if not steps:
            raise CheckpointError(
                f"{run} has no checkpoint to carry", "let the run write its first checkpoint"
            )
        newest = checkpoint_dir(run, steps[-1])
        shutil.copytree(newest, checkpoint_dir(dest, steps[-1]))
        (dest / CHECKPOINTS_DIR / LATEST_FILE).write_text(newest.name + "\n")
        names = (*RUN_RECORDS, SESSIONS_FILE)
    for name in names:
        if (run / name).exists():
            shutil.copyfile(run / name, dest / name)
        elif (dest / name).exists():
            (dest / name).unlink()  # a stale record of an earlier export
    if (dest / COMPUTE_FILE).is_file() and (machines := run_machines(run)):
        # CPU seconds mean little without the CPU, and the session log that names it stays behind
        compute = json.loads((dest / COMPUTE_FILE).read_text())
        (dest / COMPUTE_FILE).write_text(json.dumps({**compute, "machines": machines}, indent=1) + "\n")
    return dest


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
        dest: A run folder holding the run's `config.json` (e.g. written by `export_run`);
            its checkpoints are replaced by the chosen steps.
        count: How many checkpoints to keep (>= 2; the first and the last are always kept).
        steps: Exactly these checkpoints instead (e.g. `dense_window`'s); each must exist.

    Returns:
        The exported steps.

    Raises:
        CheckpointError: If `run_dir` has no checkpoints or `dest` has no config.json.
    """
    # The checkpoint format loads torch: imported here, so reading records stays torch-free
    # (interp train checks its options before torch, and the sweep records import this module).
    from interp.store.checkpoint import load_checkpoint, save_checkpoint

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
