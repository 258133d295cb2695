"""Study C's tables: one row per run, and per noise level the times and accuracies over seeds.

Reads the folders written by ``interp sweep --grid study-c`` (noise levels xi x seeds) and
``interp sweep --grid study-c-wd`` (weight decays at xi = 0.35):

* `runs_table`: one row per run: xi, weight decay, seed, whether it finished, the three times
  (`t_mem_clean`, `t_mem_noisy`, `t_gen`: first evaluated step at >= 99%, recomputed from
  `metrics.jsonl` with `tasks.ModAddTask.milestones`, so unfinished runs show their progress)
  and final accuracies;
* `xi_table`: per xi, over finished runs: each time's mean and 95% t-interval over the seeds
  that reached it, how many reached it, the final test accuracy's mean and t-interval, the
  number of seeds that generalised, and the study's reference values (docs/study_c.md);
* `regime`: a weight-decay run's regime from its final accuracies.

The figures are in `analyses.studies.study_c.figures`; `analyses.studies.study_c.report` writes both.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.report.stats import t_interval
from interp.metrics import milestones
from interp.store.run_folder import is_done, read_metrics
from interp.sweep.specs import read_sweep
from tasks import ModAddTask

TIMES = tuple(ModAddTask.milestones)  # t_mem_clean, t_mem_noisy, t_gen


# The reference notebook's values (docs/study_c.md; one seed, evaluated every 100 steps): xi -> times (None: "-" or
# "never") and final test accuracy in %.
REFERENCE: dict[float, dict[str, Any]] = {
    0.0: {"t_mem_clean": 100, "t_mem_noisy": None, "t_gen": 100, "test_acc": 100.0},
    0.1: {"t_mem_clean": 100, "t_mem_noisy": None, "t_gen": 100, "test_acc": 99.9},
    0.2: {"t_mem_clean": 100, "t_mem_noisy": None, "t_gen": 100, "test_acc": 100.0},
    0.3: {"t_mem_clean": 100, "t_mem_noisy": 100, "t_gen": 200, "test_acc": 100.0},
    0.35: {"t_mem_clean": 100, "t_mem_noisy": 100, "t_gen": 300, "test_acc": 99.7},
    0.4: {"t_mem_clean": 100, "t_mem_noisy": 100, "t_gen": 600, "test_acc": 99.3},
    0.5: {"t_mem_clean": 100, "t_mem_noisy": 100, "t_gen": None, "test_acc": 91.1},
}


FINALS = {
    "train/clean/acc": "train, clean",
    "train/corrupted/acc": "train, corrupted (corrupted labels)",
    "test/acc": "test",
}


def runs_table(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per run of a study-C sweep: coordinates, status, times and final accuracies."""
    specs, _ = read_sweep(sweep_dir)
    rows = []
    for spec in specs:
        records = read_metrics(spec.out) if (spec.out / "metrics.jsonl").exists() else []
        row: dict[str, Any] = {
            "xi": spec.task.get("xi", 0.0),
            "weight_decay": spec.train["weight_decay"],
            "seed": spec.tags.get("seed"),
            "run": str(spec.out),
            "done": is_done(spec.out),
            "epochs": spec.train["epochs"],
            "last_step": records[-1]["step"] if records else None,
        }
        for name, m in milestones(records, ModAddTask.milestones).items():
            row[name] = m["step"]
        last = records[-1] if records else {}
        row |= {f"final {k}": last.get(k) for k in FINALS}
        rows.append(row)
    return pd.DataFrame(rows)


def xi_table(runs: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per xi over finished runs: times (mean, t-interval, reached), final test accuracy, reference."""
    rows = []
    for xi, group in runs.groupby("xi", sort=True):
        done = group[group["done"]]
        row: dict[str, Any] = {"xi": xi, "runs": len(group), "finished": len(done)}
        for name in TIMES:
            reached = [int(v) for v in done[name] if not pd.isna(v)]
            mean, low, high = t_interval(reached, confidence)
            row |= {
                f"{name} mean": mean,
                f"{name} low": low,
                f"{name} high": high,
                f"{name} reached": len(reached),
            }
        acc = [100 * v for v in done["final test/acc"] if not pd.isna(v)]
        mean, low, high = t_interval(acc, confidence)
        row |= {
            "test acc mean": mean,
            "test acc low": low,
            "test acc high": high,
            "generalized": row["t_gen reached"],
        }
        ref = REFERENCE.get(round(float(xi), 4), {})
        row |= {f"ref {k}": ref.get(k) for k in (*TIMES, "test_acc")}
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt_time(row: pd.Series, name: str, xi: float) -> str:
    if name == "t_mem_noisy" and xi == 0:
        return "n/a"
    n, reached = int(row["finished"]), int(row[f"{name} reached"])
    if n == 0:
        return "-"
    if reached == 0:
        return f"never (0/{n})"
    ci = "" if math.isnan(row[f"{name} low"]) else f" [{row[f'{name} low']:.0f}, {row[f'{name} high']:.0f}]"
    return f"{row[f'{name} mean']:.0f}{ci} ({reached}/{n})"


def markdown_table(table: pd.DataFrame) -> str:
    """The measured table beside the reference, as Markdown (times: mean [95% CI] (reached/finished))."""
    lines = [
        "| xi | t_mem_clean | t_mem_noisy | t_gen | test acc % (final) | generalized | reference t_gen / test acc |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        times = [_fmt_time(row, name, row["xi"]) for name in TIMES]
        acc = "-" if math.isnan(row["test acc mean"]) else f"{row['test acc mean']:.1f}"
        if not math.isnan(row["test acc low"]):
            acc += f" [{row['test acc low']:.1f}, {min(row['test acc high'], 100):.1f}]"
        ref_gen = (
            "never" if row["ref t_gen"] is None or pd.isna(row["ref t_gen"]) else f"{row['ref t_gen']:.0f}"
        )
        lines.append(
            f"| {row['xi']:g} | {' | '.join(times)} | {acc} | {int(row['generalized'])}/{int(row['finished'])} | "
            f"{ref_gen} / {row['ref test_acc']} |"
        )
    return "\n".join(lines)


def regime(final_test: float, final_corrupted: float, high: float = 0.9, low: float = 0.1) -> str:
    """The parent work's regime from final test accuracy and corrupted-label train accuracy."""
    if final_test >= high:
        if final_corrupted >= high:
            return "coexistence"
        return "full inversion" if final_corrupted <= low else "partial inversion"
    return "memorisation" if final_corrupted >= high else "forgetting"
