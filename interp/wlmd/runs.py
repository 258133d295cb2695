"""WLMD walks into run folders: the entropy phase (`wlmd_run`) and production (`wlmd_produce`).

`wlmd_run` runs the entropy phase into a run folder; `wlmd_produce` samples with ``S`` frozen
and saves snapshots in a target window as ordinary checkpoints any analysis can open. Both stop
cleanly on a signal and resume bit-identically (a production of 50,000 steps outlasts a
working session on one core). A run folder records a vectorised walk's engine (a folder without
one is a loop walk, as every walk before the field) and `wlmd_run` refuses to resume it with
the other (`interp.store.run_folder.check_engine`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from torch import Tensor

from interp.config import to_dict
from interp.errors import CheckpointError, TrainingInterrupted
from interp.signals import stop_on_signals
from interp.store.checkpoint import drop_checkpoints
from interp.store.layout import checkpoint_dir
from interp.store.run_folder import check_engine, truncate_metrics
from interp.store.session import RunSession, open_run
from interp.wlmd.cvs import ModelCVs
from interp.wlmd.grid import flatness
from interp.wlmd.sampler import WLMD_ENGINE, Sampler, WLMDConfig

RESUME = "run the same command to continue"
"""How a stopped walk or production continues (`TrainingInterrupted.resume`)."""


def wlmd_run(
    run_dir: str | Path,
    run_config: Mapping[str, Any],
    cvs: ModelCVs,
    theta0: Tensor | None,
    config: WLMDConfig,
    steps: int,
    *,
    checkpoint_every: int = 1000,
    log_every: int = 100,
    meta: Mapping[str, Any] | None = None,
    digests: Mapping[str, str] | None = None,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Sampler:
    """Run (or resume) the entropy phase into `run_dir` until `steps` steps.

    Checkpoints hold walker 0's model state dict (so analyses open them) and the whole sampler
    state under ``train_state["wlmd"]``; `metrics.jsonl` logs ln f, flatness, walls and each
    walker's (x, y) every `log_every` steps. `digests` (of the splits the CVs are measured on)
    are stored with every checkpoint and checked on resume, as for training runs. The walk runs
    on the device of `cvs`' model (and `theta0`). `migrate` turns an existing folder's config
    into the current form before it is compared (`interp.store.run_folder.check_same_config`).

    Raises:
        ConfigError: If `run_dir` holds a walk of the other engine (`interp.store.run_folder.check_engine`), or
            another config.
        TrainingInterrupted: On SIGINT / SIGTERM / SIGHUP, after saving a checkpoint at the
            step reached (the same call resumes from it, bit-identically).
    """
    check_engine(run_dir, config.engine, **WLMD_ENGINE)
    with open_run(run_dir, {**run_config, "wlmd": to_dict(config)}, digests, migrate=migrate) as run:
        ckpt = run.resume()
        if ckpt is not None:
            sampler = Sampler(cvs, config, state=ckpt.train_state["wlmd"], device=cvs.device)
        else:
            sampler = Sampler(cvs, config, theta0)
            _save(run, sampler, cvs, meta)
        with stop_on_signals() as stop:
            while sampler.step < steps:
                if stop.signum is not None:  # a stop between steps: nothing since the last save is lost
                    if run.checkpoints()[-1] != sampler.step:
                        _save(run, sampler, cvs, meta)
                    raise TrainingInterrupted(
                        stop.signum, sampler.step, run.run_dir, unit="step", resume=RESUME
                    )
                sampler.advance()
                if sampler.step % log_every == 0:
                    run.log(
                        {
                            "step": sampler.step,
                            "ln_f": sampler.current_ln_f(),
                            "walls": sampler.walls,
                            "flatness": flatness(sampler.H.sum(0), config.schedule.flat_over),
                            "cv": sampler.cv.tolist(),
                        }
                    )
                if sampler.step % checkpoint_every == 0 or sampler.step == steps:
                    _save(run, sampler, cvs, meta)
    return sampler


def _save(run: RunSession, sampler: Sampler, cvs: ModelCVs, meta: Mapping[str, Any] | None) -> None:
    run.save(
        sampler.step,
        cvs.state_dict(sampler.theta[0]),
        {"wlmd": sampler.state_dict()},
        meta={**(meta or {}), "cv": sampler.cv[0].tolist()},
    )


PROGRESS_DIR = "progress"
"""The run folder inside a production folder that holds its resume point (`wlmd_produce`)."""


def wlmd_produce(
    out_dir: str | Path,
    run_config: Mapping[str, Any],
    cvs: ModelCVs,
    sampler: Sampler,
    steps: int,
    window: tuple[float, float, float, float],
    *,
    every: int = 1,
    max_samples: int | None = None,
    checkpoint_every: int = 1000,
    meta: Mapping[str, Any] | None = None,
    digests: Mapping[str, str] | None = None,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> list[Path]:
    """Sample with S frozen; save each walker state whose (x, y) is in `window` as a checkpoint.

    Production resumes: every `checkpoint_every` steps, and at a stop signal, the sampler's whole
    state and the number of samples saved so far are checkpointed in ``out_dir/progress`` (a run
    folder of its own). Called again, it continues from there bit-identically (same samples, same
    order), re-saving any sample a killed process wrote after that point. ``progress`` is deleted
    once DONE is written.

    Args:
        out_dir: The production's run folder; checkpoint `n` is the n-th sample (meta: x, y,
            walker, sampler step). DONE is written at the end.
        run_config: The config.json content (model, task, `train`); a ``wlmd_production``
            section with the window and steps is added.
        cvs: The collective variables the walkers are measured in.
        sampler: The sampler after its entropy phase (`wlmd_run`); it is advanced in place (on
            resume, first set to the saved state; left as it is when `out_dir` holds a finished
            production).
        steps: Production steps.
        window: ``(x_lo, x_hi, y_lo, y_hi)``, inclusive.
        every: Look at the walkers every this many steps (decorrelation).
        max_samples: Stop after this many samples.
        checkpoint_every: Save the resume point every this many production steps.
        meta: More checkpoint metadata.
        digests: Split digests of the CVs' data, stored with every sample.
        migrate: Turns an existing folder's config into the current form (as `wlmd_run`'s).

    Returns:
        The checkpoint folders of the samples (those of a finished production when `out_dir`
        holds one).

    Raises:
        CheckpointError: If `out_dir` holds samples but no resume point (a production of an
            `interp` before this one: it cannot continue; sample into a new folder), or a resume
            point of a production that started from another step of the walk than `sampler`'s
            (the walk went on since).
        TrainingInterrupted: On SIGINT / SIGTERM / SIGHUP, after saving the resume point at the
            step reached.
    """
    production = {"window": list(window), "steps": steps, "every": every, "max_samples": max_samples}
    if sampler.config.engine != "loop":  # recorded as the entropy phase records it: only when not the loop
        production["engine"] = sampler.config.engine
    config = {**run_config, "wlmd_production": production}
    x_lo, x_hi, y_lo, y_hi = window
    with open_run(out_dir, config, digests, migrate=migrate) as run:
        if run.finished() is not None:
            shutil.rmtree(run.run_dir / PROGRESS_DIR, ignore_errors=True)  # a kill after DONE left it
            return [checkpoint_dir(run.run_dir, s) for s in run.checkpoints()]
        with open_run(run.run_dir / PROGRESS_DIR, config, digests, migrate=migrate) as progress:
            start, saved = _production_start(run, progress, sampler, cvs)
            with stop_on_signals() as stop:
                while sampler.step - start < steps and (max_samples is None or len(saved) < max_samples):
                    if stop.signum is not None:
                        # Saved again at the same step, the only resume point would be replaced,
                        # and a kill in the middle would leave none.
                        if progress.checkpoints()[-1] != sampler.step - start:
                            _save_progress(progress, sampler, cvs, start, len(saved))
                        raise TrainingInterrupted(
                            stop.signum, sampler.step - start, progress.run_dir, "production step", RESUME
                        )
                    sampler.advance()
                    if sampler.step % every == 0:  # the sampler's own step: as productions always looked
                        for w in range(sampler.n_walkers):
                            x, y = sampler.cv[w].tolist()
                            inside = x_lo <= x <= x_hi and y_lo <= y <= y_hi
                            if inside and (max_samples is None or len(saved) < max_samples):
                                info = {"x": x, "y": y, "walker": w, "sampler_step": sampler.step}
                                state = cvs.state_dict(sampler.theta[w])
                                saved.append(run.save(len(saved), state, None, meta={**(meta or {}), **info}))
                                run.log({"step": len(saved) - 1, **info})
                    if (sampler.step - start) % checkpoint_every == 0:
                        _save_progress(progress, sampler, cvs, start, len(saved))
        run.finish({"samples": len(saved), "steps": steps, "window": list(window)})
    shutil.rmtree(run.run_dir / PROGRESS_DIR)  # after DONE: a kill in between leaves a finished production
    return saved


def _production_start(
    run: RunSession, progress: RunSession, sampler: Sampler, cvs: ModelCVs
) -> tuple[int, list[Path]]:
    """Where `wlmd_produce` starts: the sampler step its production started at and the samples
    saved so far. `sampler` is set to the resume point's state when there is one; a fresh
    production freezes it and saves its first resume point.
    """
    ckpt = progress.resume()
    if ckpt is None:
        if run.checkpoints():
            raise CheckpointError(
                f"{run.run_dir} holds samples but no resume point ({PROGRESS_DIR}/): an older interp "
                "wrote it, whose production could not resume",
                "sample into a new folder, or delete this one to sample again from the walk's end",
            )
        sampler.frozen = True
        _save_progress(progress, sampler, cvs, sampler.step, 0)
        return sampler.step, []
    start = int(ckpt.meta["start"])
    if start != sampler.step:
        raise CheckpointError(
            f"{run.run_dir} is a production that started from step {start} of its walk, which now "
            f"ends at step {sampler.step} (the walk went on since)",
            f"delete {run.run_dir} to sample from the walk's new end",
        )
    sampler.load_state_dict(ckpt.train_state["wlmd"])
    count = int(ckpt.meta["samples"])
    # Samples a killed process saved after the resume point are saved again (the same ones).
    drop_checkpoints(run.run_dir, [s for s in run.checkpoints() if s >= count])
    truncate_metrics(run.run_dir, count - 1)
    return start, [checkpoint_dir(run.run_dir, s) for s in range(count)]


def _save_progress(progress: RunSession, sampler: Sampler, cvs: ModelCVs, start: int, samples: int) -> None:
    """Checkpoint production's resume point (at its own step count); keep the one before it.

    Two, not one: a copy of the newest taken while production runs (a study exporting its
    state) then never races its deletion.
    """
    progress.save(
        sampler.step - start,
        cvs.state_dict(sampler.theta[0]),
        {"wlmd": sampler.state_dict()},
        meta={"start": start, "samples": samples},
    )
    drop_checkpoints(progress.run_dir, progress.checkpoints()[:-2])
