"""Study B's walks carried across machines: each seed's resumable state, small enough to commit.

A protocol-2 walk costs hours of one core a seed, and its run folders hold every checkpoint of
the walk (hundreds of MB over a long walk) outside the repository. The committed records
(`analyses.studies.study_b.records.export_results`) hold no weights, so a replaced machine
would restart every unfinished walk from step 0. `export_state(out, dest)` writes what resuming
needs instead (each run a resumable copy: `interp.store.export.export_run` with
``weights=True``), per seed that has a walk:

* ``seed_N/adamw/`` (and ``seed_N/adamw-start-<i>/``, the own starts of walkers i > 0 with
  ``walker_starts="own"``): the AdamW runs' records and newest checkpoints (the walk's starts;
  the runs are complete, so they are kept, not retrained, and the walk's cosines stay measured
  against the very same weights);
* ``seed_N/wlmd/entropy/``: the walk's run records and its newest checkpoint (walker states,
  velocities, S and H, the RNG: it resumes bit-identically);
* ``seed_N/wlmd/walk.json``: the walk's chunk records (S in the last one only, as committed);
* ``seed_N/wlmd/samples/``, while a production is under way (not yet DONE): its records, the
  samples saved so far and its newest resume point (``progress/``), so that a production
  longer than a session (up to 50,000 steps, hours of a core) resumes on the new machine too;

plus the folder's ``settings.json``. The state replaces the previous export (a few MB a seed
at protocol-2 scale: `state_size`). `restore_state(dest, out)` copies it into a fresh ``out``;
then the same ``interp study-b measure out ...`` resumes each walk from its newest checkpoint
(the walk's `config.json` names its start relative to itself, so the folder may move). A
finished production's samples and the injections are not part of the state: they are
recomputed from the restored walk.

A protocol that only raises the walk budget (protocol 4 extends protocol 3's) continues the
walks instead of repeating them: `restore_state(dest, out, settings)` with the new settings
checks that they change nothing but ``wlmd.max_steps``, and measuring `out` with them walks on
from each walk's final state. A protocol that changes the walk's dynamics (protocol 6) starts
the walks again from the same AdamW models: ``restore_state(dest, out, settings, walks=False)``
copies the AdamW runs alone (the run folders refuse them if `settings` would train them
otherwise), so the AdamW rows stay the very same models'.

Command line: ``python scripts/long_runs/study_b_state.py export OUT DEST`` and
``... restore DEST OUT [--preset NAME] [--seeds LIST] [--adamw-only]``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from analyses.studies.study_b.measure import SETTINGS_FILE, settings_difference
from analyses.studies.study_b.protocol import WALK_FILE, walk_records
from analyses.studies.study_b.records import compact_walk
from analyses.studies.study_b.settings import StudyBSettings, settings_with
from interp.config import to_dict
from interp.errors import CheckpointError, ConfigError
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.atomic import atomic_write_json
from interp.store.export import export_run
from interp.store.layout import CHECKPOINTS_DIR, LATEST_FILE
from interp.store.run_folder import DONE_FILE, SESSIONS_FILE, is_done
from interp.sweep.specs import seed_folders
from interp.wlmd.runs import PROGRESS_DIR

# The run folders of a seed that resuming its walk needs (each with its newest checkpoint only):
# these, and every walker's own start (`START_RUNS`).
RUNS = ("adamw", "wlmd/entropy")
START_RUNS = "adamw-start-*"


def export_state(out: str | Path, dest: str | Path) -> dict[int, int]:
    """Write each seed's resumable walk state from the measured folder `out` into `dest`.

    Safe while the walk runs: `walk.json` is read before the checkpoint, so the copied
    checkpoint is never older than the last record copied (a newer checkpoint is recorded again
    on resume), and a checkpoint folder is complete once it exists. What `dest` held before
    for a seed is replaced.

    Returns:
        Bytes written per seed (seeds without a walk yet are skipped).

    Raises:
        ConfigError: If `out` holds no seed folder.
    """
    out, dest = Path(out), Path(dest)
    seeds = seed_folders(out)
    if not seeds:
        raise ConfigError(f"{out} holds no seed_N folders", "give the OUT of interp study-b measure")
    dest.mkdir(parents=True, exist_ok=True)
    if (out / SETTINGS_FILE).exists():
        shutil.copyfile(out / SETTINGS_FILE, dest / SETTINGS_FILE)
    _recover(dest)
    sizes = {}
    for seed, folder in seeds.items():
        records = walk_records(folder / "wlmd")
        if not records:
            continue
        staged = dest / f".{folder.name}.tmp"
        shutil.rmtree(staged, ignore_errors=True)
        try:
            (staged / "wlmd").mkdir(parents=True)
            atomic_write_json(staged / "wlmd" / WALK_FILE, compact_walk(records))
            for run in [*RUNS, *sorted(p.name for p in folder.glob(START_RUNS))]:
                export_run(folder / run, staged / run, weights=True)
            _copy_production(folder / "wlmd" / "samples", staged / "wlmd" / "samples")
            # Swap in the complete copy: a kill leaves the previous state or the new one (a
            # kill between the two renames leaves the previous one as .old: `_recover`).
            target, old = dest / folder.name, dest / f".{folder.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():
                target.rename(old)
            staged.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # never a half copy left beside the records
        sizes[seed] = state_size(target)
    return sizes


def restore_state(
    dest: str | Path,
    out: str | Path,
    settings: StudyBSettings | None = None,
    seeds: Collection[int] | None = None,
    *,
    walks: bool = True,
) -> list[int]:
    """Copy the state exported to `dest` into `out`, for the seeds `out` has no folder of (of
    `seeds`, when given), to be measured with the exported `settings`, a larger walk budget or
    another production length.

    A seed folder that exists in `out` is left alone (its runs may be newer than the state, or
    training now).

    Args:
        dest: The exported state (`export_state`'s `dest`).
        out: The folder to resume in.
        settings: None to resume under the exported settings; or settings that differ from them
            only by a larger walk budget (``wlmd.max_steps``) and the production length
            (``wlmd.production_steps``), to continue walks under a protocol that extends them.
            The budget does not enter the dynamics, so the continued walk is the one a larger
            budget would have walked from the start; production comes after the walk. `out` is
            then measured with `settings`: its production samples and injections are
            recomputed from where the walk ends (a production under way is not restored).
        seeds: The seeds to restore (None: every exported one), e.g. only the walks that
            ended, to continue them while the others still walk.
        walks: False to copy each seed's AdamW runs only (``adamw``, ``adamw-start-*``), for
            `settings` that walk anew from the same AdamW models; `settings` may then change
            anything (`measure` refuses an AdamW run that its settings would train otherwise).

    Returns:
        The seeds restored.

    Raises:
        ConfigError: If `dest` holds no exported state (or none of a seed asked for),
            `settings` change more than the budget and production (with `walks`), no `settings`
            come without `walks`, or `out`'s settings differ from what it is restored with.
    """
    dest, out = Path(dest), Path(out)
    _recover(dest)
    exported_seeds = {s: f for s, f in seed_folders(dest).items() if (f / "wlmd" / WALK_FILE).exists()}
    if not exported_seeds:
        raise ConfigError(f"{dest} holds no exported walk state", "give the DEST of study_b_state.py export")
    if missing := sorted(set(seeds or ()) - set(exported_seeds)):
        raise ConfigError(
            f"{dest} holds no walk state of seed {', '.join(map(str, missing))}",
            f"choose from {', '.join(map(str, exported_seeds))}",
        )
    wanted = _wanted_settings(dest, settings, walks)
    if wanted is not None:
        here = out / SETTINGS_FILE
        if here.exists() and (difference := settings_difference(json.loads(here.read_text()), wanted)):
            key, before, now = difference
            raise ConfigError(
                f"{out} was measured with {key} = {before!r}, not the {now!r} it is restored with",
                "restore with the settings it was measured with (--preset), or into a new folder",
            )
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(here, wanted)
    restored = []
    for seed, folder in exported_seeds.items():
        if seeds is not None and seed not in seeds:
            continue
        target = out / folder.name
        if target.exists():  # its runs may be newer than the state, or training now
            continue
        if walks:
            # A production under way resumes only from the walk's end it started from, with
            # its own length: under other settings it is sampled anew.
            skip = shutil.ignore_patterns("samples") if settings is not None else None
            shutil.copytree(folder, target, ignore=skip)
        else:
            for run in [folder / RUNS[0], *sorted(folder.glob(START_RUNS))]:
                shutil.copytree(run, target / run.name)
        restored.append(seed)
    return restored


def _wanted_settings(dest: Path, settings: StudyBSettings | None, walks: bool) -> dict[str, Any] | None:
    """The settings `restore_state` measures with: the exported ones, `settings` checked to
    extend them (with `walks`), or `settings` as given (AdamW runs alone).
    """
    exported = json.loads((dest / SETTINGS_FILE).read_text()) if (dest / SETTINGS_FILE).exists() else None
    wanted = exported
    if not walks:
        if settings is None:
            raise ConfigError(
                "restoring the AdamW runs alone needs the settings of the new walks",
                "give the preset they are measured with (--preset)",
            )
        wanted = to_dict(settings)
    elif settings is not None:
        if exported is None:
            raise ConfigError(
                f"{dest} holds no {SETTINGS_FILE}: nothing says which settings its walks ran with",
                "restore it without settings",
            )
        _check_extends(exported, settings, dest)
        wanted = to_dict(settings)
    return wanted


def _check_extends(exported: dict[str, Any], settings: StudyBSettings, dest: Path) -> None:
    """Refuse `settings` unless they are the `exported` ones with an equal or larger walk budget,
    larger only where the exported walks ended at the end of a chunk, and any production length.

    A walk advances in chunks of ``report_every`` steps and checks its targets at their ends, so
    a walk that ended at its budget walks on as if given the larger one from the start only if
    that budget was a chunk's end.

    Raises:
        ConfigError: Naming the first other setting, or the two budgets.
    """
    if difference := settings_difference(_walk_settings(exported), _walk_settings(to_dict(settings))):
        key, before, now = difference
        raise ConfigError(
            f"the walks in {dest} ran with {key} = {before!r}, not {now!r}: only a larger "
            "wlmd.max_steps or another wlmd.production_steps continues them",
            "restore them with their own settings, or measure the new settings in a new folder",
        )
    old, new = settings_with(exported).wlmd, settings.wlmd
    if new.budget() < old.budget():
        raise ConfigError(
            f"the walks in {dest} may have walked {old.budget()} steps, more than the new budget of "
            f"{new.budget()}",
            f"give wlmd.max_steps >= {old.budget()}",
        )
    if new.budget() > old.budget() and old.budget() % old.report_every:
        raise ConfigError(
            f"the walks in {dest} ended at step {old.budget()}, inside a {old.report_every}-step chunk: "
            "walked on, they would check their targets at other steps than a walk given the larger "
            "budget from the start",
            "measure the new settings in a new folder",
        )


_NOT_THE_WALK = ("max_steps", "production_steps")
"""WLMD settings a restored walk may change: the budget only says when the walk stops, and
production (recomputed after a restore from the walk's final state) comes after it."""


def _walk_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` without the WLMD settings a continued walk may change (`_NOT_THE_WALK`)."""
    wlmd = {key: value for key, value in settings["wlmd"].items() if key not in _NOT_THE_WALK}
    return {**settings, "wlmd": wlmd}


def _recover(dest: Path) -> None:
    """Put back a previous state that an export killed between its two renames left as ``.old``."""
    for old in dest.glob(".seed_*.old") if dest.is_dir() else []:
        target = dest / old.name[1:].removesuffix(".old")
        if not target.exists():
            old.rename(target)


def state_size(folder: str | Path) -> int:
    """Bytes of every file under `folder`."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _copy_production(samples: Path, target: Path) -> None:
    """A production under way (none: nothing): its newest resume point, then every sample and
    the records, but never DONE.

    In that order, so that a production still running while it is copied leaves at least the
    samples its resume point counts (those it saves later are dropped on resume, and saved
    again); without DONE, a production that ends while it is copied is finished from the
    resume point after restore instead of read back with samples missing. One that ends
    before its resume point is copied is not carried (its samples are recomputed).
    """
    progress = samples / PROGRESS_DIR
    if is_done(samples) or not progress.is_dir() or not list_checkpoints(progress):
        return
    try:
        export_run(progress, target / PROGRESS_DIR, weights=True)
    except (FileNotFoundError, CheckpointError):
        if is_done(samples):  # it ended (and removed its resume points) meanwhile
            shutil.rmtree(target, ignore_errors=True)
            return
        raise
    steps = list_checkpoints(samples)
    for step in steps:
        shutil.copytree(checkpoint_dir(samples, step), checkpoint_dir(target, step))
    if steps:
        (target / CHECKPOINTS_DIR / LATEST_FILE).write_text(checkpoint_dir(samples, steps[-1]).name + "\n")
    export_run(samples, target)
    (target / DONE_FILE).unlink(missing_ok=True)  # one that ended meanwhile finishes after restore
    if (samples / SESSIONS_FILE).exists():  # it resumes in this folder: its session log goes with it
        shutil.copyfile(samples / SESSIONS_FILE, target / SESSIONS_FILE)
