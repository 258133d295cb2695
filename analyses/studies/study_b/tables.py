"""Study B's tables, rebuilt from measured run folders or from their exported records.

From a folder `analyses.studies.study_b.measure` measured (no retraining): `table` (one row per
seed, model and noise: accuracy before and after injection, its stop, how far the model moved),
`summary` (mean, min and max over seeds), `wlmd_frame` (each seed's walk and injected sample)
and the effective ranks before and after injection (`seed_ranks`, `rank_table`); `write_tables`
writes them as CSV. From the exported records alone: `untested` (why a seed's sample does not
test the claim), `paired_differences` (WLMD minus AdamW per noise, with t-intervals) and
`markdown_tables`, the docs' tables (``interp study-b records``).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.report.stats import t_interval
from analyses.studies.study_b.figures import cosine_frame, rank_frame
from analyses.studies.study_b.measure import (
    MODELS,
    NOISES,
    SETTINGS_FILE,
    injected_choice,
    measured_settings,
    selected_seeds,
)
from analyses.studies.study_b.protocol import source_cvs, walk_records
from analyses.studies.study_b.settings import WLMDSettings
from interp.errors import ConfigError
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.run_folder import is_done, read_config, read_done, read_metrics
from interp.text import format_table

# Study B's reference (docs/study_b.md): original-task test accuracy after injecting *random* noise (the gap is
# said to narrow as the noise resembles the task; no numbers are given for square / sum).
REFERENCE = {"adamw": "< 0.75 (random)", "wlmd": "~0.95 (0.95-0.98, random)"}


RANK_MATRICES = ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out", "W_E", "W_U")


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


def table(out: str | Path, seeds: Collection[int] | None = None) -> pd.DataFrame:
    """One row per (seed, model, noise) from the finished injection runs under ``out/seed_*``
    (of `seeds` only, when given).

    ``retention`` is the original task's test accuracy at the stop divided by the one at the start.
    """
    rows = []
    for seed, folder in selected_seeds(out, seeds).items():
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
    for seed, folder in selected_seeds(out, seeds).items():
        if not (folder / "wlmd").exists():  # not walked yet
            rows.append({"seed": seed, "samples": 0})
            continue
        entropy = read_metrics(folder / "wlmd" / "entropy")
        row: dict[str, Any] = {"seed": seed, "samples": 0}
        row["x_adamw"], row["y_adamw"] = source_cvs(folder / "adamw")
        row.update(dict.fromkeys(_SAMPLE_COLUMNS))  # the same columns, in one order, with or without a sample
        chosen = injected_choice(folder / "wlmd", settings)
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


def before_after(folder: Path, noise: str) -> dict[str, Path | str] | None:
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
    frames = [seed_ranks(folder, noise) for folder in selected_seeds(out, seeds).values()]
    return mean_ranks([f for f in frames if f is not None])


def seed_ranks(folder: str | Path, noise: str = "random") -> pd.DataFrame | None:
    """One seed's whole-layer effective ranks of `RANK_MATRICES` before and after its `noise`
    injections (``matrix``, ``layer``, then ``adamw before`` ...), or None unless both finished.
    """
    models = before_after(Path(folder), noise)
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


def read_frame(path: Path) -> pd.DataFrame:
    """A table written by `write_tables` or `export_results` (empty if absent or without columns)."""
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):  # an empty frame writes a blank file
        return pd.DataFrame()


def untested(walk: pd.Series | Mapping[str, Any], settings: Mapping[str, Any]) -> str | None:
    """Why a seed's WLMD sample does not test the claim, or None when it does (`walk` is a
    `wlmd_frame` row; `settings` the measured settings as JSON).

    Strict: settings that set no target (protocol 1's) give ``"no targets set"``, since nothing
    then says whether the sample tests the claim; and a value that a set target needs but the
    row lacks (absent or NaN) counts as not meeting it, with its reason. The reasons: no sample
    at all (production found no snapshot in the window, so only AdamW was injected), its
    walker's cosine to its own start above the walk's `target_cosine` (the walk's largest cosine
    in records without that column), the walk's flatness below `target_flatness`, or its ``ln f``
    halved fewer than `target_halvings` times.
    """
    wlmd = settings.get("wlmd", {})
    cosine_target, flat, halvings = (
        wlmd.get("target_cosine"),
        settings.get("target_flatness"),
        wlmd.get("target_halvings"),
    )
    if (cosine_target, flat, halvings) == (None, None, None):
        return "no targets set"
    reasons = []
    samples = _value(walk, "samples")
    if samples is None:
        reasons.append("no sample count recorded")
    elif samples == 0:
        reasons.append("no production sample in the window")
    # The sample's walker's cosine; records written before that column have the walk's largest.
    cosine = _value(walk, "sample_walker_cosine" if "sample_walker_cosine" in walk else "walk_cosine_max")
    if samples == 0:  # no sample, so no sample's cosine to miss: the missing sample is the reason
        cosine_target = None
    shortfalls = (
        _shortfall(
            "cosine to the start", cosine, cosine_target, operator.gt, lambda v, t: f"cosine {v:.3f} > {t}"
        ),
        _shortfall(
            "flatness",
            _value(walk, "walk_flatness"),
            flat,
            operator.lt,
            lambda v, t: f"flatness {v:.3g} < {t}",
        ),
        _shortfall(
            "ln f halvings",
            _value(walk, "walk_halvings"),
            halvings,
            operator.lt,
            lambda v, t: f"ln f halved {v:.0f} times < {t}",
        ),
    )
    return ", ".join(reasons + [r for r in shortfalls if r is not None]) or None


def _shortfall(
    what: str, value: Any, target: Any, misses: Callable[[Any, Any], bool], reason: Callable[[Any, Any], str]
) -> str | None:
    """Why `value` does not meet `target` (None if it does, or if no target is set): `reason`
    when `misses` says so, and ``no <what> recorded`` without a value.
    """
    if target is None:
        return None
    if value is None:
        return f"no {what} recorded (target {target})"
    return reason(value, target) if misses(value, target) else None


def _value(row: pd.Series | Mapping[str, Any], key: str) -> Any:
    """`row`'s `key`, or None where it is absent, None or NaN."""
    value = row.get(key)
    return None if value is None or pd.isna(value) else value


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


def _status(row: pd.Series, cap: int) -> str:
    if bool(row["reached"]):
        return f"reached at step {int(row['steps'])}"
    return f"**not reached** (cap {cap}), noise {row['noise_acc_after']:.3f}"


def markdown_tables(dest: str | Path) -> str:
    """The docs' retention table (every run with its status), with two seeds or more the paired
    WLMD - AdamW differences (`paired_differences`), and the WLMD table, from `export_results` records.
    """
    dest = Path(dest)
    runs = read_frame(dest / "study_b_runs.csv")
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
