"""Study B's compact records and figures: what a repository keeps of a measured folder.

`export_results(out, dest)` writes a measured folder's compact records (settings, tables, each
seed's walk records and effective ranks, each injection run's record; no weights) into e.g.
``results/study-b/<protocol>``, seed by seed as they finish; `record_figures` draws the study's
figures from those records alone, `write_figures` from the run folders themselves.
`analyses.studies.study_b.tables.markdown_tables` rebuilds the docs' tables from the records.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_b.figures import forgetting_figure, rank_figure, walk_figure
from analyses.studies.study_b.measure import (
    MODELS,
    NOISES,
    SETTINGS_FILE,
    measured_seeds,
    measured_settings,
    selected_seeds,
    unfinished,
)
from analyses.studies.study_b.protocol import walk_records
from analyses.studies.study_b.settings import WLMDSettings
from analyses.studies.study_b.tables import (
    before_after,
    mean_ranks,
    read_frame,
    seed_ranks,
    summary,
    write_tables,
)
from interp.config import from_dict, to_dict
from interp.errors import ConfigError
from interp.store.atomic import atomic_write_json
from interp.store.export import export_run
from interp.store.run_folder import is_done, read_config
from interp.sweep.specs import seed_folders

SEED_RANKS = "ranks_random.csv"  # per exported seed folder: its `seed_ranks`, so later exports can average


def export_results(out: str | Path, dest: str | Path, seeds: Collection[int] | None = None) -> Path:
    """Write the compact records of a measured folder into `dest` (e.g. ``results/study-b/<name>``).

    `dest` gets ``settings.json``, the tables as ``study_b_<frame>.csv`` (`write_tables`; paths
    made relative to `out`), per seed the walk records ``seed_<N>/walk.json`` (the S grid kept
    only in the last record), its effective ranks (`SEED_RANKS`) and each injection's compact
    record (`interp.store.export.export_run`; its ``config.json`` names the source relative to
    `out`): a few hundred kB in all, no weights. `tables.markdown_tables(dest)` rebuilds the
    docs tables from them.

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
        frame = read_frame(out / f"study_b_{name}.csv")
        if "source" in frame.columns:
            frame["source"] = [relative_to_folder(s, out) for s in frame["source"]]
        kept = read_frame(dest / f"study_b_{name}.csv")
        if "seed" in kept.columns:
            others = kept[~kept["seed"].isin(list(exported))]
            frame = pd.concat([others, frame]).sort_values("seed", kind="stable")
        frame.to_csv(dest / f"study_b_{name}.csv", index=False)
    for folder in exported.values():
        _export_seed(folder, dest / folder.name, out)
    runs = read_frame(dest / "study_b_runs.csv")
    if len(runs):
        summary(runs).to_csv(dest / "study_b_summary.csv", index=False)
    ranks = mean_ranks([pd.read_csv(path) for path in sorted(dest.glob(f"seed_*/{SEED_RANKS}"))])
    ranks.to_csv(dest / "study_b_ranks_random.csv", index=False)
    return dest


def _export_seed(folder: Path, target: Path, out: Path) -> None:
    """One seed's compact records (`export_results`) from its `folder` under `out` into `target`."""
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
        export_run(run, target / run.name)
        # The config with the injection's source as the tables name it: relative to `out`, not
        # this machine's path.
        config = read_config(run)
        config["injection"]["source"] = relative_to_folder(config["injection"]["source"], out)
        atomic_write_json(target / run.name / "config.json", config)


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


def relative_to_folder(path: str, root: Path) -> str:
    """`path` relative to `root` where it lies inside it, else as given (a measured folder may move)."""
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


def _targets(settings: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """The walk's cosine target, the sample's flatness target and the ln f its halvings target
    asks for, of measured settings (as JSON; `walk_figure`'s arguments).
    """
    wlmd = from_dict(WLMDSettings, settings.get("wlmd", {}), where="the measured WLMD settings")
    return wlmd.target_cosine, settings.get("target_flatness"), wlmd.target_ln_f()


def write_figures(out: str | Path, seeds: Collection[int] | None = None) -> list[Path]:
    """Per seed, the study's figures as HTML in ``out/seed_<N>``: forgetting curves AdamW vs WLMD
    per noise type (`forgetting_figure`), the walk so far (`walk_figure`) and
    effective-rank bars before / after the random-noise injection (`rank_figure`). Runs
    that are not finished are skipped.
    """
    written = []
    for seed, folder in selected_seeds(out, seeds).items():
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
        models = before_after(folder, "random")
        if models:
            path = folder / "ranks_random.html"
            rank_figure(models).write_html(path, include_plotlyjs="directory")
            written.append(path)
    return written


def record_figures(dest: str | Path) -> dict[str, Any]:
    """The study's figures from `export_results` records, which hold no weights.

    Returns:
        ``"walks"``: every seed's walk in one figure (`walk_figure`, with the
        settings' targets), and ``"seed_<N>/forgetting_<noise>"``: AdamW against WLMD per
        seed and noise (`forgetting_figure`), for the injections that finished.
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
