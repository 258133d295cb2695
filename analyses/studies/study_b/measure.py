"""Study B measured: the whole protocol per seed at a configurable (CPU) scale.

`measure(out, seeds, StudyBSettings(...))` runs, for every seed, `analyses.studies.study_b.protocol`'s
steps: goldilocks AdamW -> WLMD on a grid confined to the functional region around it ->
injection of each noise type into both models; every step resumes or is skipped when complete.
A folder keeps the settings it was first measured with (`settings_difference` refuses others).
`analyses.studies.study_b.tables` rebuilds the results from the run folders without retraining,
and `analyses.studies.study_b.records` writes their compact records and figures. Command line::

    interp study-b measure OUT [--seeds 0-2] [--preset NAME] [--settings JSON] [--table-only]

docs/study_b.md has the protocol's reasoning and the measured table.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_b.protocol import (
    goldilocks,
    grid_holding,
    inject,
    source_cvs,
    walk_records,
    wlmd_sample,
)
from analyses.studies.study_b.settings import StudyBSettings, WLMDSettings
from interp.config import absent_value, from_dict, to_dict
from interp.errors import ConfigError, note
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.atomic import atomic_write_json
from interp.store.run_folder import is_done, read_metrics
from interp.sweep.specs import seed_folder, seed_folders
from interp.wlmd.runs import PROGRESS_DIR

SETTINGS_FILE = "settings.json"


NOISES = ("random", "square", "sum")


MODELS = ("adamw", "wlmd")


def wlmd_samples(
    folder: str | Path,
    adamw: str | Path,
    seed: int,
    settings: StudyBSettings,
    device: str = "cpu",
    starts: Sequence[str | Path] | None = None,
) -> list[Path]:
    """WLMD from `adamw` on the narrow grid into ``folder`` (reused if its production is DONE; a
    production stopped before its end resumes, or, written by an `interp` whose production
    could not resume, is run again from the walk's end, to the same samples), on `device`; walker i
    starts at ``starts[i]`` when given (the grid then widened to hold every start:
    `study_b.grid_holding`).

    Returns:
        The sample checkpoint folders (possibly none).
    """
    folder = Path(folder)
    if is_done(folder / "samples"):
        return [checkpoint_dir(folder / "samples", s) for s in list_checkpoints(folder / "samples")]
    if (folder / "samples").exists() and not (folder / "samples" / PROGRESS_DIR).exists():
        # A production stopped before its end, written before production could resume. It
        # starts from the walk's final checkpoint and its random stream: run again, it saves
        # the same samples.
        note(f"{folder / 'samples'}: production stopped before its end; sampling again from the walk's end")
        shutil.rmtree(folder / "samples")
    wlmd = dataclasses.replace(settings.wlmd, seed=seed)
    grid = None
    if starts is not None:
        grid = grid_holding(wlmd, source_cvs(adamw, wlmd.k), [source_cvs(s, wlmd.k) for s in starts])
    _, samples = wlmd_sample(folder, adamw, wlmd, grid=grid, starts=starts, device=device)
    return samples


def injected_sample(folder: str | Path, settings: StudyBSettings) -> Path | None:
    """The WLMD sample of a seed's ``wlmd`` folder that is injected: the last production sample
    of a walker whose cosine to its own start had reached `target_cosine` at the walk's end (the
    last sample of all when none had, or without a target); None without samples.
    """
    chosen = injected_choice(Path(folder), settings)
    return None if chosen is None else checkpoint_dir(Path(folder) / "samples", chosen[0])


def injected_choice(folder: Path, settings: StudyBSettings) -> tuple[int, int, float | None] | None:
    """``(sample step, its walker, that walker's cosine to its start at the walk's end)`` of
    `injected_sample` (the cosine None without walk records), or None.

    Raises:
        ConfigError: If the walk's records or the samples' log do not match `settings`' walkers.
    """
    samples = folder / "samples"
    if not is_done(samples) or not list_checkpoints(samples):
        return None
    walker = {r["step"]: r["walker"] for r in read_metrics(samples)}  # one log line a sample
    steps = list_checkpoints(samples)
    target, records = settings.wlmd.target_cosine, walk_records(folder)
    cosines = records[-1]["cosine"] if records else None
    if target is not None and cosines is not None:
        if len(cosines) != settings.wlmd.walkers or set(steps) - set(walker):
            raise ConfigError(
                f"{folder}'s walk records {len(cosines)} walkers and its samples' log names "
                f"{len(set(walker) & set(steps))} of {len(steps)} samples, for {settings.wlmd.walkers} walkers",
                "measure it again in a new folder: its walk and samples come from other settings",
            )
        far = [s for s in steps if cosines[walker[s]] <= target]
        steps = far or steps
    chosen = walker[steps[-1]]
    return steps[-1], chosen, None if cosines is None else cosines[chosen]


def adamw_run(
    out: str | Path, seed: int, settings: StudyBSettings, *, epochs: int | None = None, device: str = "cpu"
) -> Path:
    """The goldilocks AdamW run of `settings` with init seed `seed` into `out` (resumed or kept
    if there), for `epochs` (default: the settings').
    """
    return goldilocks(
        out,
        p=settings.p,
        train_frac=settings.train_frac,
        weight_norm=settings.weight_norm,
        epochs=settings.epochs if epochs is None else epochs,
        lr=settings.lr,
        seed=seed,
        model_overrides=settings.model_overrides,
        device=device,
    )


def run_seed(
    out: str | Path, seed: int, settings: StudyBSettings = StudyBSettings(), device: str = "cpu"
) -> Path:
    """Goldilocks AdamW -> WLMD sample -> 3 noise types x 2 models of injection, for one seed.

    Every step resumes, or is skipped when its folder is complete. With ``walker_starts="own"``
    walker i > 0 starts at its own AdamW model (``seed_<seed>/adamw-start-<i>``). The injected
    WLMD model is `injected_sample`'s (the last production sample of a walker that reached the
    cosine target); without a sample only AdamW is injected (with a warning).

    Args:
        out: The parent folder; this seed writes ``out/seed_<seed>/{adamw, wlmd, inject-*}``.
        seed: Model init seed, WLMD seed and seed of the new embedding rows (data seed 0).
        settings: Every other setting.
        device: Where every step trains and walks (``"cpu"``, ``"cuda"``, ...); checkpoints are
            stored on the CPU.

    Returns:
        The seed folder.
    """
    folder = seed_folder(out, seed)
    adamw = adamw_run(folder / "adamw", seed, settings, device=device)
    starts = None
    if settings.walker_starts == "own":
        starts = [adamw] + [
            adamw_run(folder / f"adamw-start-{i}", start, settings, device=device)
            for i, start in enumerate(settings.start_seeds(seed)[1:], 1)
        ]
    wlmd_samples(folder / "wlmd", adamw, seed, settings, device, starts)
    sample = injected_sample(folder / "wlmd", settings)
    if sample is None:
        warnings.warn(
            f"seed {seed}: no WLMD sample in the window; only the AdamW model is injected", stacklevel=2
        )
    sources = {"adamw": adamw, **({"wlmd": sample} if sample is not None else {})}
    cfg = settings.finetune_config()
    for noise in NOISES:
        for label, source in sources.items():
            inject(
                folder / f"inject-{label}-{noise}",
                source,
                noise,
                k=settings.k,
                config=cfg,
                keep_norm=settings.injection_keep_norm,
                seed=seed,
                device=device,
            )
    return folder


def selected_seeds(out: str | Path, seeds: Collection[int] | None) -> dict[int, Path]:
    """`seed_folders(out)`, only `seeds` when given: a seed still training beside finished ones
    stays out of their tables and records.
    """
    return {s: f for s, f in seed_folders(out).items() if seeds is None or s in seeds}


def measured_seeds(out: str | Path, seeds: Collection[int] | None = None) -> dict[int, Path]:
    """The seed folders under `out` (of `seeds` only, when given) with at least one finished
    injection run: the ones that have rows in the retention table, and that an export records.
    """
    return {
        s: f
        for s, f in selected_seeds(out, seeds).items()
        if any(is_done(f / f"inject-{label}-{noise}") for label in MODELS for noise in NOISES)
    }


def unfinished(out: str | Path, seeds: Collection[int] | None = None) -> dict[int, str]:
    """Per seed folder under `out` (of `seeds`) with no finished injection yet, where it stands
    (the stage it is in and, during the walk, the step of its last record), e.g.
    ``{2: "walking, step 96,000"}``.
    """
    done = measured_seeds(out, seeds)
    where = {}
    for seed, folder in selected_seeds(out, seeds).items():
        if seed in done:
            continue
        if (folder / "wlmd" / "samples").exists():
            where[seed] = "walk done, sampling and injecting"
        elif records := walk_records(folder / "wlmd"):  # none before the walk's first record
            where[seed] = f"walking, step {records[-1]['step']:,}"
        else:
            where[seed] = "training its AdamW model" if (folder / "adamw").exists() else "not started"
    return where


def measured_settings(out: str | Path) -> StudyBSettings:
    """The settings a folder was measured with (its ``settings.json``; the defaults without one)."""
    path = Path(out) / SETTINGS_FILE
    if not path.exists():
        return StudyBSettings()
    return from_dict(StudyBSettings, json.loads(path.read_text()), where=str(path))


def measure(
    out: str | Path,
    seeds: Sequence[int] = (0, 1, 2),
    settings: StudyBSettings = StudyBSettings(),
    device: str = "cpu",
) -> pd.DataFrame:
    """Run the protocol for every seed (resuming finished steps) on `device` and return `table`'s rows.

    The settings are written to ``out/settings.json`` (a folder measured with other settings is
    refused: its tables would mix two protocols).

    Raises:
        ConfigError: If `out` was measured with other settings.
    """
    out = Path(out)
    path, wanted = out / SETTINGS_FILE, to_dict(settings)
    if path.exists() and (difference := settings_difference(json.loads(path.read_text()), wanted)):
        key, before, now = difference
        hint = "add --vectorize, " if key == "wlmd.engine" and now == "loop" else ""
        raise ConfigError(
            f"{out} was measured with other settings ({key}: {before!r}, now {now!r})",
            f"{hint}use a new folder, or the same settings",
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, wanted)
    for seed in seeds:
        run_seed(out, seed, settings, device)
    from analyses.studies.study_b.tables import table  # tables read what this module writes

    return table(out)


# What an absent key of the fields `to_dict` may leave out means (`param(..., added=True)` or
# ``absent=``, `interp.config.absent_value`); their names differ between StudyBSettings and WLMDSettings.
_ADDED_DEFAULTS = {
    f.name: absent_value(f)
    for cls in (StudyBSettings, WLMDSettings)
    for f in dataclasses.fields(cls)
    if absent_value(f) is not dataclasses.MISSING
}


def settings_difference(
    found: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str = ""
) -> tuple[str, Any, Any] | None:
    """The first differing setting as ``(dotted key, found value, wanted value)``, nested objects
    compared key by key, or None if the settings are the same (a setting absent reads as its
    default: the fields added after settings were first written are left out at their defaults,
    e.g. the loop engine).
    """
    for key in dict.fromkeys([*wanted, *found]):
        default = _ADDED_DEFAULTS.get(key)
        before, now = found.get(key, default), wanted.get(key, default)
        if isinstance(before, Mapping) and isinstance(now, Mapping):
            if before != now:
                return settings_difference(before, now, f"{prefix}{key}.")
        elif before != now:
            return f"{prefix}{key}", before, now
    return None
