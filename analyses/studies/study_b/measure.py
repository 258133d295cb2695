"""Study B measured: the whole protocol per seed at a configurable (CPU) scale, and its tables.

`measure(out, seeds, StudyBSettings(...))` runs, for every seed, `analyses.studies.study_b.protocol`'s steps:
goldilocks AdamW -> WLMD on a grid confined to the functional region around it -> injection of
each noise type into both models; every step resumes or is skipped when complete. `table`,
`summary`, `wlmd_frame` and `rank_table` rebuild the results from the run folders without
retraining. Command line::

    interp study-b measure OUT [--seeds 0-2] [--settings JSON] [--table-only]

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

from analyses.report.stats import t_interval
from analyses.studies.study_b.protocol import (
    cosine_frame,
    forgetting_figure,
    goldilocks,
    grid_holding,
    inject,
    rank_figure,
    rank_frame,
    source_cvs,
    walk_figure,
    walk_records,
    wlmd_sample,
)
from analyses.studies.study_b.settings import StudyBSettings, WLMDSettings
from interp.config import absent_value, from_dict, to_dict
from interp.errors import ConfigError, note
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.atomic import atomic_write_json
from interp.store.run_folder import is_done, read_config, read_done, read_metrics
from interp.sweep.specs import seed_folder, seed_folders
from interp.text import format_table
from interp.wlmd.sampler import PROGRESS_DIR

SETTINGS_FILE = "settings.json"
NOISES = ("random", "square", "sum")
MODELS = ("adamw", "wlmd")
# Study B's reference (docs/study_b.md): original-task test accuracy after injecting *random* noise (the gap is
# said to narrow as the noise resembles the task; no numbers are given for square / sum).
REFERENCE = {"adamw": "< 0.75 (random)", "wlmd": "~0.95 (0.95-0.98, random)"}
RANK_MATRICES = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_E", "W_U")


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
    chosen = _injected(Path(folder), settings)
    return None if chosen is None else checkpoint_dir(Path(folder) / "samples", chosen[0])


def _injected(folder: Path, settings: StudyBSettings) -> tuple[int, int, float | None] | None:
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


def injection_row(run: str | Path) -> dict[str, Any]:
    """One finished injection run: its source, stop, original test accuracy before / after, cosine."""
    run = Path(run)
    config, done, records = read_config(run), read_done(run), read_metrics(run)
    source = config["injection"]["source"]
    cos = cosine_frame({"x": (source, run)}).iloc[0]
    return {
        "noise": config["injection"]["noise"],
        "test_acc_before": records[0]["test/acc"],
        "test_acc_after": done["final"]["test/acc"],
        "noise_acc_after": done["final"].get("train/noise/acc"),
        "reached": done["reached"],
        "steps": done["steps"],
        "cosine_before_after": float(cos["cosine"]),
        "distance_before_after": float(cos["distance"]),
        "source": source,
    }


def _seed_folders(out: str | Path, seeds: Collection[int] | None) -> dict[int, Path]:
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
        for s, f in _seed_folders(out, seeds).items()
        if any(is_done(f / f"inject-{label}-{noise}") for label in MODELS for noise in NOISES)
    }


def unfinished(out: str | Path, seeds: Collection[int] | None = None) -> dict[int, str]:
    """Per seed folder under `out` (of `seeds`) with no finished injection yet, where it stands
    (the stage it is in and, during the walk, the step of its last record), e.g.
    ``{2: "walking, step 96,000"}``.
    """
    done = measured_seeds(out, seeds)
    where = {}
    for seed, folder in _seed_folders(out, seeds).items():
        if seed in done:
            continue
        if (folder / "wlmd" / "samples").exists():
            where[seed] = "walk done, sampling and injecting"
        elif records := walk_records(folder / "wlmd"):  # none before the walk's first record
            where[seed] = f"walking, step {records[-1]['step']:,}"
        else:
            where[seed] = "training its AdamW model" if (folder / "adamw").exists() else "not started"
    return where


def table(out: str | Path, seeds: Collection[int] | None = None) -> pd.DataFrame:
    """One row per (seed, model, noise) from the finished injection runs under ``out/seed_*``
    (of `seeds` only, when given).

    ``retention`` is the original task's test accuracy at the stop divided by the one at the start.
    """
    rows = []
    for seed, folder in _seed_folders(out, seeds).items():
        for label in MODELS:
            for noise in NOISES:
                run = folder / f"inject-{label}-{noise}"
                if is_done(run):
                    rows.append({"seed": seed, "model": label, **injection_row(run)})
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["retention"] = frame["test_acc_after"] / frame["test_acc_before"]
    return frame


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean (min, max) over seeds per noise and model of `table`'s rows, with the reference."""
    grouped = frame.groupby(["noise", "model"], sort=False)
    result = grouped.agg(
        seeds=("seed", "count"),
        test_acc_after=("test_acc_after", "mean"),
        test_acc_after_min=("test_acc_after", "min"),
        test_acc_after_max=("test_acc_after", "max"),
        reached=("reached", "sum"),
        steps=("steps", "mean"),
        cosine_before_after=("cosine_before_after", "mean"),
    ).reset_index()
    result["reference"] = [
        REFERENCE[m] if n == "random" else "gap narrower than random"
        for n, m in zip(result["noise"], result["model"])
    ]
    return result


_SAMPLE_COLUMNS = (
    "x_wlmd",
    "y_wlmd",
    "sample_walker",
    "sample_walker_cosine",
    "cosine_adamw_wlmd",
    "distance_adamw_wlmd",
)
"""`wlmd_frame`'s columns of the injected sample (empty for a seed without one)."""


def wlmd_frame(out: str | Path, seeds: Collection[int] | None = None) -> pd.DataFrame:
    """Per seed: the AdamW model's (x, y), the injected WLMD sample's (`injected_sample`), its
    walker and that walker's cosine to its own start at the walk's end, the cosine between the
    sample and the seed's AdamW model, and how far the walk came (`walk_summary`).

    A seed whose production found no snapshot in the window (``samples`` 0) keeps its AdamW
    start and its walk, so its row tells "no sample" apart from "no walk"; the sample's
    columns are then empty.
    """
    rows, settings = [], measured_settings(out)
    for seed, folder in _seed_folders(out, seeds).items():
        if not (folder / "wlmd").exists():  # not walked yet
            rows.append({"seed": seed, "samples": 0})
            continue
        entropy = read_metrics(folder / "wlmd" / "entropy")
        row: dict[str, Any] = {"seed": seed, "samples": 0}
        row["x_adamw"], row["y_adamw"] = source_cvs(folder / "adamw")
        row.update(dict.fromkeys(_SAMPLE_COLUMNS))  # the same columns, in one order, with or without a sample
        chosen = _injected(folder / "wlmd", settings)
        if chosen is not None:
            samples = folder / "wlmd" / "samples"
            sample = checkpoint_dir(samples, chosen[0])
            cos = cosine_frame({"x": (folder / "adamw", sample)}).iloc[0]
            row["samples"] = len(list_checkpoints(samples))
            row["x_wlmd"], row["y_wlmd"] = source_cvs(sample)
            row["sample_walker"], row["sample_walker_cosine"] = chosen[1], chosen[2]
            row["cosine_adamw_wlmd"], row["distance_adamw_wlmd"] = (
                float(cos["cosine"]),
                float(cos["distance"]),
            )
        rows.append(
            {
                **row,
                "walls": entropy[-1]["walls"] if entropy else None,
                "entropy_steps": entropy[-1]["step"] if entropy else 0,
                **walk_summary(folder / "wlmd", settings.wlmd),
            }
        )
    return pd.DataFrame(rows)


def measured_settings(out: str | Path) -> StudyBSettings:
    """The settings a folder was measured with (its ``settings.json``; the defaults without one)."""
    path = Path(out) / SETTINGS_FILE
    if not path.exists():
        return StudyBSettings()
    return from_dict(StudyBSettings, json.loads(path.read_text()), where=str(path))


def walk_summary(folder: str | Path, wlmd: WLMDSettings | None = None) -> dict[str, Any]:
    """The last `walk_record` of a WLMD folder: steps, the walkers' largest cosine to the start,
    flatness, visited bins and the last change of S (empty without records); with the classic
    schedule of `wlmd`, also the halvings of ``ln f`` (the ramp has none, so its tables keep
    their columns).
    """
    records = walk_records(folder)
    if not records:
        return {}
    last = records[-1]
    summary = {
        "walk_steps": last["step"],
        "walk_cosine_max": max(last["cosine"]),
        "walk_flatness": last["flatness"],
        "walk_visited_bins": last["visited"],
        "walk_S_change": last["S_change"],
    }
    if wlmd is not None and wlmd.ln_f_schedule == "classic":
        summary["walk_halvings"] = wlmd.halvings(last["ln_f"])
    return summary


def _before_after(folder: Path, noise: str) -> dict[str, Path | str] | None:
    """``{"adamw before": source, "adamw after": run, "wlmd before": ..., ...}`` of a seed's
    `noise` injections, or None unless both are finished.
    """
    runs = {label: folder / f"inject-{label}-{noise}" for label in MODELS}
    if not all(is_done(run) for run in runs.values()):
        return None
    models: dict[str, Path | str] = {}
    for label, run in runs.items():
        models[f"{label} before"] = read_config(run)["injection"]["source"]
        models[f"{label} after"] = run
    return models


def rank_table(out: str | Path, noise: str = "random", seeds: Collection[int] | None = None) -> pd.DataFrame:
    """Whole-layer effective ranks, mean over seeds: AdamW / WLMD before and after `noise` injection."""
    frames = [seed_ranks(folder, noise) for folder in _seed_folders(out, seeds).values()]
    return mean_ranks([f for f in frames if f is not None])


def seed_ranks(folder: str | Path, noise: str = "random") -> pd.DataFrame | None:
    """One seed's whole-layer effective ranks of `RANK_MATRICES` before and after its `noise`
    injections (``matrix``, ``layer``, then ``adamw before`` ...), or None unless both finished.
    """
    models = _before_after(Path(folder), noise)
    if not models:
        return None
    frame = rank_frame(models)
    return frame[frame["matrix"].isin(RANK_MATRICES)].reset_index(drop=True)


def mean_ranks(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """The mean of several seeds' `seed_ranks` per matrix and layer, with the number of ``seeds``."""
    if not frames:
        return pd.DataFrame()
    grouped = pd.concat(frames).groupby(["matrix", "layer"], sort=False)
    return grouped.mean(numeric_only=True).assign(seeds=grouped.size()).reset_index()


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


def write_figures(out: str | Path, seeds: Collection[int] | None = None) -> list[Path]:
    """Per seed, the study's figures as HTML in ``out/seed_<N>``: forgetting curves AdamW vs WLMD
    per noise type (`study_b.forgetting_figure`), the walk so far (`study_b.walk_figure`) and
    effective-rank bars before / after the random-noise injection (`study_b.rank_figure`). Runs
    that are not finished are skipped.
    """
    written = []
    for seed, folder in _seed_folders(out, seeds).items():
        for noise in NOISES:
            runs = {label: folder / f"inject-{label}-{noise}" for label in MODELS}
            runs = {
                ("AdamW" if label == "adamw" else "WLMD"): run for label, run in runs.items() if is_done(run)
            }
            if runs:
                path = folder / f"forgetting_{noise}.html"
                forgetting_figure(runs).update_layout(title=f"{folder.name}, {noise} noise").write_html(
                    path, include_plotlyjs="directory"
                )
                written.append(path)
        walk = walk_records(folder / "wlmd")
        if walk:
            path = folder / "walk.html"
            walk_figure(
                {folder.name.replace("_", " "): walk}, *_targets(to_dict(measured_settings(out)))
            ).write_html(path, include_plotlyjs="directory")
            written.append(path)
        models = _before_after(folder, "random")
        if models:
            path = folder / "ranks_random.html"
            rank_figure(models).write_html(path, include_plotlyjs="directory")
            written.append(path)
    return written


def write_tables(out: str | Path, seeds: Collection[int] | None = None) -> Path:
    """Write `table`, `summary`, `wlmd_frame` and `rank_table` (of `seeds`, default every seed
    folder) as CSV and one text file into ``out``.
    """
    out = Path(out)
    frames = {"runs": table(out, seeds)}
    if len(frames["runs"]):
        frames["summary"] = summary(frames["runs"])
    frames |= {"wlmd": wlmd_frame(out, seeds), "ranks_random": rank_table(out, "random", seeds)}
    lines = []
    for name, frame in frames.items():
        frame.to_csv(out / f"study_b_{name}.csv", index=False)
        shown = frame.drop(columns=[c for c in ("source",) if c in frame.columns])
        table_text = format_table([str(c) for c in shown.columns], shown.to_numpy().tolist())
        lines += [f"## {name}", "", table_text, ""]
    (out / "study_b_tables.txt").write_text("\n".join(lines))
    return out / "study_b_tables.txt"


RUN_RECORDS = ("config.json", "metrics.jsonl", "DONE")  # what a repository keeps of a run: no weights
SEED_RANKS = "ranks_random.csv"  # per exported seed folder: its `seed_ranks`, so later exports can average


def export_results(out: str | Path, dest: str | Path, seeds: Collection[int] | None = None) -> Path:
    """Write the compact records of a measured folder into `dest` (e.g. ``results/study-b/<name>``).

    `dest` gets ``settings.json``, the tables as ``study_b_<frame>.csv`` (`write_tables`; paths
    made relative to `out`), per seed the walk records ``seed_<N>/walk.json`` (the S grid kept
    only in the last record), its effective ranks (`SEED_RANKS`) and each injection's
    ``config.json``, ``metrics.jsonl`` and ``DONE``: a few hundred kB in all, no weights.
    `markdown_tables(dest)` rebuilds the docs tables from them.

    Only seeds with a finished injection run are exported (`measured_seeds`): a seed still
    walking has no row to add, and its walk is carried by its resumable state instead
    (scripts/long_runs/study_b_state.py).

    Seeds finish one at a time, maybe on different machines, so the records of seeds already in
    `dest` that `out` does not export (another machine's, or an earlier export's) are kept:
    their rows stay in the runs and WLMD tables, and the summary and the mean ranks are
    recomputed over every seed. A seed is exported once, when it finishes, and never has to be
    measured again for a later table (a re-measurement on other hardware rounds differently and
    ends elsewhere; docs/study_b.md).

    Raises:
        ConfigError: If `dest` holds records measured with other settings, or no seed of `out`
            (of `seeds`) has a finished injection run.
    """
    import shutil

    out, dest = Path(out), Path(dest)
    _check_same_settings(out, dest)
    exported = measured_seeds(out, seeds)
    if not exported:
        where = "; ".join(f"seed {s}: {w}" for s, w in unfinished(out, seeds).items()) or "no seed folders"
        raise ConfigError(
            f"nothing to export from {out}: no seed has a finished injection run yet ({where})",
            "export a seed once interp study-b measure has finished it",
        )
    write_tables(out, list(exported))
    dest.mkdir(parents=True, exist_ok=True)
    if (out / SETTINGS_FILE).exists():
        shutil.copyfile(out / SETTINGS_FILE, dest / SETTINGS_FILE)
    for name in ("runs", "wlmd"):
        frame = _read_frame(out / f"study_b_{name}.csv")
        if "source" in frame.columns:
            frame["source"] = [_relative(s, out) for s in frame["source"]]
        kept = _read_frame(dest / f"study_b_{name}.csv")
        if "seed" in kept.columns:
            others = kept[~kept["seed"].isin(list(exported))]
            frame = pd.concat([others, frame]).sort_values("seed", kind="stable")
        frame.to_csv(dest / f"study_b_{name}.csv", index=False)
    for folder in exported.values():
        _export_seed(folder, dest / folder.name, out)
    runs = _read_frame(dest / "study_b_runs.csv")
    if len(runs):
        summary(runs).to_csv(dest / "study_b_summary.csv", index=False)
    ranks = mean_ranks([pd.read_csv(path) for path in sorted(dest.glob(f"seed_*/{SEED_RANKS}"))])
    ranks.to_csv(dest / "study_b_ranks_random.csv", index=False)
    return dest


def _export_seed(folder: Path, target: Path, out: Path) -> None:
    """One seed's compact records (`export_results`) from its `folder` under `out` into `target`."""
    import shutil

    records = walk_records(folder / "wlmd")
    if records:
        target.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target / "walk.json", compact_walk(records))
    ranks = seed_ranks(folder)
    if ranks is not None:
        target.mkdir(parents=True, exist_ok=True)
        ranks.to_csv(target / SEED_RANKS, index=False)
    for run in sorted(folder.glob("inject-*")):
        if not (run / "config.json").exists():
            continue
        (target / run.name).mkdir(parents=True, exist_ok=True)
        for name in RUN_RECORDS:
            if name != "config.json" and (run / name).exists():
                shutil.copyfile(run / name, target / run.name / name)
        # The config with the injection's source as the tables name it: relative to `out`, not
        # this machine's path.
        config = read_config(run)
        config["injection"]["source"] = _relative(config["injection"]["source"], out)
        atomic_write_json(target / run.name / "config.json", config)


def _read_frame(path: Path) -> pd.DataFrame:
    """A table written by `write_tables` or `export_results` (empty if absent or without columns)."""
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):  # an empty frame writes a blank file
        return pd.DataFrame()


def _check_same_settings(out: Path, dest: Path) -> None:
    """Refuse to add `out`'s records to a `dest` measured with other settings."""
    ours, theirs = out / SETTINGS_FILE, dest / SETTINGS_FILE
    if ours.exists() and theirs.exists() and json.loads(ours.read_text()) != json.loads(theirs.read_text()):
        raise ConfigError(
            f"{dest} holds records measured with other settings than {out}'s ({SETTINGS_FILE} differs)",
            "export into a new folder, or into the records of the same protocol",
        )


def compact_walk(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A walk's records with the S grid kept in the last one only (the committed form: S is
    the bulk of each record, and only the last S is read).
    """
    return [{k: v for k, v in r.items() if k != "S"} for r in records[:-1]] + records[-1:]


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


def _status(row: pd.Series, cap: int) -> str:
    if bool(row["reached"]):
        return f"reached at step {int(row['steps'])}"
    return f"**not reached** (cap {cap}), noise {row['noise_acc_after']:.3f}"


def untested(walk: pd.Series | Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """Why a seed's WLMD sample does not test the claim, or None when it does: no sample at all
    (production found no snapshot in the window, so only AdamW was injected), its walker's
    cosine to its own start above the walk's `target_cosine`, the walk's flatness below
    `target_flatness`, or its ``ln f`` halved fewer than `target_halvings` times (`walk` is a
    `wlmd_frame` row; `settings` the measured settings as JSON).
    """
    reasons = []
    samples = walk.get("samples")
    if samples is not None and not pd.isna(samples) and samples == 0:
        reasons.append("no production sample in the window")
    target = settings.get("wlmd", {}).get("target_cosine")
    cosine = walk.get("sample_walker_cosine", walk.get("walk_cosine_max"))
    if target is not None and cosine is not None and not pd.isna(cosine) and cosine > target:
        reasons.append(f"cosine {cosine:.3f} > {target}")
    flat = settings.get("target_flatness")
    flatness = walk.get("walk_flatness")
    if flat is not None and flatness is not None and not pd.isna(flatness) and flatness < flat:
        reasons.append(f"flatness {flatness:.3g} < {flat}")
    halvings = settings.get("wlmd", {}).get("target_halvings")
    halved = walk.get("walk_halvings")
    if halvings is not None and halved is not None and not pd.isna(halved) and halved < halvings:
        reasons.append(f"ln f halved {halved:.0f} times < {halvings}")
    return ", ".join(reasons) or None


def paired_differences(
    runs: pd.DataFrame, wlmd: pd.DataFrame | None, settings: Mapping[str, Any], confidence: float = 0.95
) -> pd.DataFrame:
    """Per noise, WLMD minus AdamW test accuracy after injection, seed by seed (the two models of
    a seed share its data and its AdamW start, so the seeds are paired): mean and Student-t
    interval over every seed with both runs, and again over the seeds whose walk tests the
    claim (`untested` is None), the only ones that bear on it.

    Args:
        runs: `study_b_runs.csv`'s rows (`table`).
        wlmd: `study_b_wlmd.csv`'s rows (`wlmd_frame`), or None (every seed then counts as untested).
        settings: The measured settings as JSON.
        confidence: Of the intervals.

    Returns:
        One row per noise: ``seeds``, ``mean``, ``low``, ``high`` over all paired seeds;
        ``tested``, ``tested_mean``, ``tested_low``, ``tested_high`` over the tested ones (NaN
        where fewer than 2, or none, make the value).
    """
    tested_seeds = set()
    if wlmd is not None:
        tested_seeds = {int(row["seed"]) for _, row in wlmd.iterrows() if untested(row, settings) is None}
    rows = []
    for noise in NOISES:
        sub = runs[runs["noise"] == noise]
        acc = sub.pivot_table(index="seed", columns="model", values="test_acc_after").dropna()
        diff = acc["wlmd"] - acc["adamw"] if set(MODELS) <= set(acc.columns) else pd.Series(dtype=float)
        tested = diff[[s in tested_seeds for s in diff.index]]
        mean, low, high = t_interval(diff.tolist(), confidence)
        t_mean, t_low, t_high = t_interval(tested.tolist(), confidence)
        rows.append(
            {
                "noise": noise,
                "seeds": len(diff),
                "mean": mean,
                "low": low,
                "high": high,
                "tested": len(tested),
                "tested_mean": t_mean,
                "tested_low": t_low,
                "tested_high": t_high,
            }
        )
    return pd.DataFrame(rows)


def _difference_markdown(frame: pd.DataFrame) -> str:
    def interval(mean: float, low: float, high: float) -> str:
        if pd.isna(mean):
            return "-"
        return f"{mean:+.4f}" + ("" if pd.isna(low) else f" [{low:+.4f}, {high:+.4f}]")

    lines = [
        "| noise | seeds | WLMD - AdamW, mean [95% t-interval] | seeds testing the claim | "
        "WLMD - AdamW over those |",
        "|---|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        lines.append(
            f"| {r['noise']} | {r['seeds']} | {interval(r['mean'], r['low'], r['high'])} | {r['tested']} | "
            f"{interval(r['tested_mean'], r['tested_low'], r['tested_high'])} |"
        )
    return "\n".join(lines)


def _targets(settings: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """The walk's cosine target, the sample's flatness target and the ln f its halvings target
    asks for, of measured settings (as JSON; `walk_figure`'s arguments).
    """
    wlmd = from_dict(WLMDSettings, settings.get("wlmd", {}), where="the measured WLMD settings")
    return wlmd.target_cosine, settings.get("target_flatness"), wlmd.target_ln_f()


def record_figures(dest: str | Path) -> dict[str, Any]:
    """The study's figures from `export_results` records, which hold no weights.

    Returns:
        ``"walks"``: every seed's walk in one figure (`study_b.walk_figure`, with the
        settings' targets), and ``"seed_<N>/forgetting_<noise>"``: AdamW against WLMD per
        seed and noise (`study_b.forgetting_figure`), for the injections that finished.
        Entries with nothing to draw are left out.
    """
    dest = Path(dest)
    settings = json.loads((dest / SETTINGS_FILE).read_text()) if (dest / SETTINGS_FILE).exists() else {}
    seeds = seed_folders(dest)
    walks = {f"seed {s}": walk_records(f) for s, f in seeds.items()}
    figures: dict[str, Any] = {}
    if any(walks.values()):
        figures["walks"] = walk_figure({k: v for k, v in walks.items() if v}, *_targets(settings))
    for seed, folder in seeds.items():
        for noise in NOISES:
            runs = {
                name: folder / f"inject-{label}-{noise}"
                for label, name in (("adamw", "AdamW"), ("wlmd", "WLMD"))
                if is_done(folder / f"inject-{label}-{noise}")
            }
            if runs:
                figures[f"seed_{seed}/forgetting_{noise}"] = forgetting_figure(runs).update_layout(
                    title=f"seed {seed}, {noise} noise: original-task test accuracy (solid) and noise accuracy (dotted)"
                )
    return figures


def write_record_figures(dest: str | Path, folder: str | Path) -> list[Path]:
    """`record_figures(dest)` as offline HTML pages under `folder` (``walks.html``,
    ``seed_<N>/forgetting_<noise>.html``).
    """
    from analyses.report.plots import write_figure

    return [write_figure(fig, Path(folder) / f"{name}.html") for name, fig in record_figures(dest).items()]


def markdown_tables(dest: str | Path) -> str:
    """The docs' retention table (every run with its status), with two seeds or more the paired
    WLMD - AdamW differences (`paired_differences`), and the WLMD table, from `export_results` records.
    """
    dest = Path(dest)
    runs = _read_frame(dest / "study_b_runs.csv")
    if not len(runs):
        raise ConfigError(
            f"{dest} holds no finished injection run (its study_b_runs.csv is empty or absent)",
            "give records that interp study-b measure --export wrote from a finished seed",
        )
    settings = json.loads((dest / SETTINGS_FILE).read_text()) if (dest / SETTINGS_FILE).exists() else {}
    cap = settings.get("max_steps", "?")
    lines = [
        "| noise | seed | AdamW | WLMD | AdamW: stop | WLMD: stop | cos before/after, AdamW | cos, WLMD |",
        "|---|---|---|---|---|---|---|---|",
    ]
    wlmd = pd.read_csv(dest / "study_b_wlmd.csv") if (dest / "study_b_wlmd.csv").exists() else None
    for noise in NOISES:
        sub = runs[runs["noise"] == noise]
        for seed in sorted(sub["seed"].unique()):
            cells = {m: sub[(sub["seed"] == seed) & (sub["model"] == m)] for m in MODELS}
            acc = [f"{c['test_acc_after'].iloc[0]:.4f}" if len(c) else "-" for c in cells.values()]
            stop = [_status(c.iloc[0], cap) if len(c) else "-" for c in cells.values()]
            walk = wlmd[wlmd["seed"] == seed] if wlmd is not None else None
            reason = untested(walk.iloc[0], settings) if walk is not None and len(walk) else None
            if reason:
                stop[1] = f"**claim not tested** ({reason})" + (f"; {stop[1]}" if len(cells["wlmd"]) else "")
            cos = [f"{c['cosine_before_after'].iloc[0]:.3f}" if len(c) else "-" for c in cells.values()]
            lines.append(f"| {noise} | {seed} | {' | '.join(acc)} | {' | '.join(stop)} | {' | '.join(cos)} |")
        means = [sub[sub["model"] == m] for m in MODELS]
        acc = [f"**{m['test_acc_after'].mean():.4f}**" if len(m) else "-" for m in means]
        reached = [f"{int(m['reached'].sum())}/{len(m)} reached" for m in means]
        cos = [f"{m['cosine_before_after'].mean():.3f}" if len(m) else "-" for m in means]
        lines.append(
            f"| **{noise}** | **mean** | {' | '.join(acc)} | {' | '.join(reached)} | {' | '.join(cos)} |"
        )
    text = "\n".join(lines)
    if runs["seed"].nunique() > 1:
        text += "\n\n" + _difference_markdown(paired_differences(runs, wlmd, settings))
    if wlmd is not None:
        shown = wlmd.drop(columns=[c for c in ("source",) if c in wlmd.columns])
        columns = [str(c) for c in shown.columns]
        rows = [
            [_wlmd_cell(c, v) for c, v in zip(columns, row)]
            for row in shown.astype(object).to_numpy().tolist()
        ]
        text += "\n\n" + format_table(columns, rows)
    return text


_COUNTS = (
    "seed",
    "samples",
    "sample_walker",
    "walls",
    "entropy_steps",
    "walk_steps",
    "walk_visited_bins",
    "walk_halvings",
)
"""The WLMD table's columns of counts and steps (a gap in one reads it back as floats)."""


def _wlmd_cell(column: str, value: Any) -> Any:
    """A WLMD-table value as it reads best: a count or a step without decimals, a small flatness
    in significant digits.
    """
    if column in _COUNTS and isinstance(value, float) and value.is_integer():
        return f"{value:.0f}"
    if column == "walk_flatness" and isinstance(value, float) and 0 < value < 1e-3:
        return f"{value:.2g}"
    return value
