"""One run's life cycle: create or verify, lock, skip if done, resume, log, save, finish.

Every engine that writes a run folder (`interp.training.loop.train`, vectorised seeds,
`interp.training.finetuning.finetune`, the WLMD sampler) goes through `open_run`, so the rules that
make a run safe to kill at any moment live in one place:

* the folder's `config.json` is created, or checked to hold the same config (`create_run`);
* an exclusive lock keeps a second process out for as long as the session is open;
* `finished()` tells a run that already wrote `DONE` (it is never retrained);
* `resume()` loads a checkpoint, refuses one whose stored split digests differ from the data
  rebuilt now (the task code or data seed changed), and cuts `metrics.jsonl` back to the
  checkpoint's step, so the records logged after it by a killed process are not logged twice
  (and a line torn by a kill is dropped); it records the session in `sessions.jsonl` and notes a
  thread count other than the run's, or a machine other than the last session's (bit-exact
  resume holds only for the same count on the same CPU);
* `save()` stores the digests with every checkpoint; `finish()` writes `DONE` last.

Usage::

    with open_run(run_dir, config, digests=split_digests(splits)) as run:
        if (done := run.finished()) is not None:
            return done
        ckpt = run.resume()          # None: a fresh run
        ...
        run.log({"step": step, **metrics})
        run.save(step, state_dict, train_state)
        return run.finish(summary)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from interp.errors import note
from interp.store.checkpoint import Checkpoint, list_checkpoints, save_checkpoint
from interp.store.handle import DIGESTS_KEY, RunHandle, check_digests
from interp.store.provenance import machine, thread_count
from interp.store.run_folder import (
    append_metrics,
    append_session,
    create_run,
    is_done,
    mark_done,
    read_done,
    read_metrics,
    read_sessions,
    run_lock,
    truncate_metrics,
)


@contextlib.contextmanager
def open_run(
    run_dir: str | os.PathLike[str],
    config: Mapping[str, Any],
    digests: Mapping[str, str] | None = None,
    *,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Iterator[RunSession]:
    """Create (or verify) the run folder, hold its lock, and yield its `RunSession`.

    Args:
        run_dir: The run folder (created if needed).
        config: What `config.json` holds; an existing folder must hold the same.
        digests: ``{split name: digest}`` of the data the run trains on (`interp.splits.split_digests`),
            stored with every checkpoint and checked on resume; None for runs without splits.
        migrate: Turns the config an existing folder holds into the current form before it is
            compared with `config` (a run written by an older `interp` resumes; its config.json
            stays as written).

    Raises:
        ConfigError: If the folder holds a run with another config.
        CheckpointError: If another process holds the folder's lock.
    """
    path = create_run(run_dir, config, migrate=migrate)
    with run_lock(path):
        yield RunSession(path, None if digests is None else dict(digests))


class RunSession:
    """An open, locked run folder (see `open_run`). Holds no training state of its own."""

    def __init__(self, run_dir: Path, digests: dict[str, str] | None) -> None:
        self.run_dir = run_dir
        self.digests = digests

    def finished(self) -> dict[str, Any] | None:
        """The `DONE` summary if the run has finished, else None."""
        return read_done(self.run_dir) if is_done(self.run_dir) else None

    def checkpoints(self) -> list[int]:
        """The steps of the run's complete checkpoints, in increasing order."""
        return list_checkpoints(self.run_dir)

    def resume(self, step: int | None = None, *, load_train_state: bool = True) -> Checkpoint | None:
        """Load a checkpoint to continue from, and cut the metrics log back to its step.

        Args:
            step: The checkpoint's step; None for the latest, -1 to start afresh.
            load_train_state: Also load the optimizer/RNG state (`Checkpoint.train_state`).

        Returns:
            The checkpoint, or None when starting afresh (no checkpoint yet, or ``step=-1``);
            then every metrics record is dropped (they belong to a run killed before its first
            checkpoint).

        Raises:
            CheckpointError: If the checkpoint is damaged, or its data digests differ from this
                session's (`interp.store.handle.check_digests`, naming the split and both digests).
        """
        if step == -1 or not self.checkpoints():
            truncate_metrics(self.run_dir, -1)
            append_session(self.run_dir, 0)
            return None
        ckpt = RunHandle(self.run_dir).load_checkpoint(step, load_train_state=load_train_state)
        if self.digests is not None:
            check_digests(
                ckpt.meta.get(DIGESTS_KEY, {}),
                self.digests,
                ckpt.path,
                hint="the task code or data seed differs; train into a new --out folder",
            )
        truncate_metrics(self.run_dir, ckpt.step)
        last = (read_sessions(self.run_dir) or [{}])[-1].get("machine")  # None: not recorded
        append_session(self.run_dir, ckpt.step)
        if last is not None and last != (here := machine()):
            note(
                f"{self.run_dir} ran on {_cpu(last)} and resumes on {_cpu(here)}: another CPU rounds "
                "some float sums differently, so the run will not be bit-identical to one that never moved"
            )
        started, now = ckpt.config.get("threads"), thread_count()
        if started is not None and started != now:
            note(
                f"{self.run_dir} started with {started} torch threads and resumes with {now}: float sums "
                f"differ between thread counts, so it will not be bit-identical to an uninterrupted run "
                f"(use --threads {started} for that)"
            )
        return ckpt

    def log(self, record: Mapping[str, Any]) -> None:
        """Append one metrics record (``{"step": int, ...}``) to `metrics.jsonl`, durably."""
        append_metrics(self.run_dir, record)

    def metrics(self) -> list[dict[str, Any]]:
        """Every complete record of `metrics.jsonl`, in order."""
        return read_metrics(self.run_dir)

    def save(
        self,
        step: int,
        state_dict: Mapping[str, Tensor],
        train_state: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write the checkpoint of `step` atomically (with the data digests) and point LATEST at it."""
        full_meta = {**({DIGESTS_KEY: self.digests} if self.digests is not None else {}), **(meta or {})}
        return save_checkpoint(self.run_dir, step, state_dict, train_state, meta=full_meta)

    def finish(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """Write `DONE` with `summary` (call it after the last checkpoint) and return the summary."""
        mark_done(self.run_dir, summary)
        return dict(summary)


def _cpu(machine: Mapping[str, Any]) -> str:
    """A session's machine in a few words: ``"Intel(R) Xeon(R) Processor (AVX512)"``."""
    return f"{machine.get('cpu') or 'an unnamed CPU'} ({machine.get('cpu_capability') or '?'})"
