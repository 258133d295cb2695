"""Study C end to end: label-noise grokking in the quadratic MLP, from sweep folders to the table.

Reads the folders written by ``interp sweep --grid study-c`` (noise levels xi x seeds) and
``interp sweep --grid study-c-wd`` (weight decays at xi = 0.35), and builds:

* `runs_table`: one row per run: xi, weight decay, seed, whether it finished, the three times
  (`t_mem_clean`, `t_mem_noisy`, `t_gen`: first evaluated step at >= 99%, recomputed from
  `metrics.jsonl` with `tasks.ModAddTask.milestones`, so unfinished runs show their progress)
  and final accuracies;
* `xi_table`: per xi, over finished runs: each time's mean and 95% t-interval over the seeds
  that reached it, how many reached it, the final test accuracy's mean and t-interval, the
  number of seeds that generalised, and the study's reference values (docs/study_c.md);
* figures: times vs xi (log y), final accuracies vs xi, training curves per xi (mean over
  seeds), and the weight-decay regimes (corrupted-example accuracy against corrupted and true
  labels, and test accuracy, over training);
* `write_study_c(sweep, wd_sweep)`: all of it into ``SWEEP/study_c/``.

Command line (no `interp` needed):
``interp study-c report runs/study-c [--wd runs/study-c-wd] [--ipr] [--out DIR]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from scipy import stats

from interp.metrics import evaluate, milestones
from interp.splits import Split
from interp.store import checkpoint_dir, list_checkpoints
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


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval of the mean; NaN bounds for fewer than 2 values, exact for no spread."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    sem = float(x.std(ddof=1) / math.sqrt(len(x)))
    if sem == 0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return mean, float(low), float(high)


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


def times_figure(runs: pd.DataFrame, table: pd.DataFrame) -> go.Figure:
    """The three times against xi (log y): mean with 95% t-interval, each seed, and the reference."""
    fig = go.Figure()
    colors = dict(zip(TIMES, ("#1f77b4", "#ff7f0e", "#2ca02c")))
    done = runs[runs["done"]]
    for i, name in enumerate(TIMES):
        offset = (i - 1) * 0.006  # keep the three series apart at each xi
        mean = table[f"{name} mean"]
        fig.add_scatter(
            x=table["xi"] + offset,
            y=mean,
            name=f"{name} (mean, 95% CI)",
            mode="lines+markers",
            line_color=colors[name],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": (table[f"{name} high"] - mean).tolist(),
                "arrayminus": (mean - table[f"{name} low"]).tolist(),
            },
            hovertemplate=f"{name}<br>xi %{{x:.2f}}<br>mean step %{{y:.0f}}<extra></extra>",
        )
        fig.add_scatter(
            x=done["xi"] + offset,
            y=done[name],
            name=f"{name} (each seed)",
            mode="markers",
            marker={"color": colors[name], "symbol": "circle-open"},
            customdata=done["seed"],
            hovertemplate=f"{name}<br>xi %{{x:.2f}}, seed %{{customdata}}<br>step %{{y}}<extra></extra>",
        )
    ref = [(xi, r["t_gen"]) for xi, r in REFERENCE.items() if r["t_gen"] is not None]
    fig.add_scatter(
        x=[x for x, _ in ref],
        y=[y for _, y in ref],
        name="t_gen, reference (eval every 100)",
        mode="markers",
        marker={"symbol": "x", "size": 10, "color": "black"},
    )
    fig.update_layout(
        title="Study C: times to memorise and to generalise vs label noise xi (first step at >= 99%)",
        xaxis_title="label-noise fraction xi",
        yaxis={"type": "log", "title": "step"},
    )
    return fig


def final_accuracy_figure(runs: pd.DataFrame) -> go.Figure:
    """Final accuracies against xi: mean over finished seeds, each seed, and the reference test accuracy."""
    done = runs[runs["done"]]
    fig = go.Figure()
    for key, label in FINALS.items():
        means = done.groupby("xi")[f"final {key}"].mean()
        fig.add_scatter(x=means.index, y=means.values, name=f"{label} (mean)", mode="lines+markers")
        fig.add_scatter(
            x=done["xi"],
            y=done[f"final {key}"],
            name=f"{label} (each seed)",
            mode="markers",
            marker={"symbol": "circle-open"},
            customdata=done["seed"],
            hovertemplate=f"{label}<br>xi %{{x}}, seed %{{customdata}}<br>acc %{{y:.4f}}<extra></extra>",
        )
    fig.add_scatter(
        x=list(REFERENCE),
        y=[r["test_acc"] / 100 for r in REFERENCE.values()],
        name="test, reference",
        mode="markers",
        marker={"symbol": "x", "size": 10, "color": "black"},
    )
    fig.update_layout(
        title="Study C: final accuracies vs label noise xi",
        xaxis_title="label-noise fraction xi",
        yaxis_title="accuracy (corrupted examples scored against their corrupted labels)",
    )
    return fig


def curves_figure(runs: pd.DataFrame) -> go.Figure:
    """Training curves per xi (mean over the given runs at each evaluated step), one panel per metric."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(FINALS.values()), shared_yaxes=True)
    palette = ["#440154", "#443983", "#31688e", "#21918c", "#35b779", "#90d743", "#fde725"]
    for i, (xi, group) in enumerate(runs.groupby("xi", sort=True)):
        frames = [pd.DataFrame(read_metrics(r)) for r in group["run"] if (Path(r) / "metrics.jsonl").exists()]
        if not frames:
            continue
        mean = pd.concat(frames).groupby("step").mean(numeric_only=True)
        x = np.maximum(mean.index.to_numpy(), 1)
        for col, key in enumerate(FINALS, start=1):
            if key in mean:
                fig.add_scatter(
                    x=x,
                    y=mean[key],
                    name=f"xi = {xi:g} ({len(frames)} seeds)",
                    legendgroup=str(xi),
                    showlegend=col == 1,
                    line_color=palette[i % len(palette)],
                    row=1,
                    col=col,
                    hovertemplate=f"xi {xi:g}<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
                )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_yaxes(title_text="accuracy (mean over seeds)", col=1)
    fig.update_layout(title="Study C: training curves per label-noise level", height=420)
    return fig


def regime(final_test: float, final_corrupted: float, high: float = 0.9, low: float = 0.1) -> str:
    """The parent work's regime from final test accuracy and corrupted-label train accuracy."""
    if final_test >= high:
        if final_corrupted >= high:
            return "coexistence"
        return "full inversion" if final_corrupted <= low else "partial inversion"
    return "memorisation" if final_corrupted >= high else "forgetting"


def inversion_curve(run_dir: str | Path) -> pd.DataFrame:
    """Accuracy of the corrupted train examples against their *true* labels at every checkpoint."""
    from analyses.subject import load_subject

    rows = []
    for step in list_checkpoints(run_dir):
        subject = load_subject(checkpoint_dir(run_dir, step))
        train = subject.splits["train"]
        mask = train.groups["corrupted"]
        true = Split("true", train.tokens[mask], train.extras["true_labels"][mask])
        rows.append(
            {
                "step": step,
                "corrupted true-label acc": evaluate(subject.model.readout, {"true": true}, subject.loss)[
                    "true/acc"
                ],
            }
        )
    return pd.DataFrame(rows)


def wd_figure(wd_runs: pd.DataFrame, inversions: dict[str, pd.DataFrame] | None = None) -> go.Figure:
    """Weight-decay regimes at fixed xi: corrupted-example accuracy (corrupted and true labels) and test accuracy."""
    wd_runs = wd_runs.sort_values("weight_decay")
    rows = [row for _, row in wd_runs.iterrows()]
    titles = [
        f"wd {row['weight_decay']:g}: "
        + (regime(row["final test/acc"], row["final train/corrupted/acc"]) if row["done"] else "running")
        for row in rows
    ]
    fig = make_subplots(rows=1, cols=max(1, len(rows)), subplot_titles=titles, shared_yaxes=True)
    styles = {
        "train/corrupted/acc": ("corrupted examples, corrupted labels", "#d62728"),
        "test/acc": ("test", "#2ca02c"),
        "train/clean/acc": ("clean train", "#1f77b4"),
    }
    for col, row in enumerate(rows, start=1):
        metrics = pd.DataFrame(read_metrics(row["run"]))
        x = np.maximum(metrics["step"].to_numpy(), 1)
        wd = row["weight_decay"]
        for key, (label, color) in styles.items():
            fig.add_scatter(
                x=x,
                y=metrics[key],
                name=label,
                line_color=color,
                legendgroup=key,
                showlegend=col == 1,
                row=1,
                col=col,
                hovertemplate=f"wd {wd:g}<br>{label}<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
            )
        inv = (inversions or {}).get(row["run"])
        if inv is not None and len(inv):
            fig.add_scatter(
                x=np.maximum(inv["step"], 1),
                y=inv["corrupted true-label acc"],
                mode="markers+lines",
                name="corrupted examples, true labels",
                line={"color": "#9467bd", "dash": "dot"},
                legendgroup="true",
                showlegend=col == 1,
                row=1,
                col=col,
                hovertemplate=f"wd {wd:g}<br>corrupted, true labels<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
            )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_yaxes(title_text="accuracy", col=1)
    xi = wd_runs["xi"].iloc[0] if len(wd_runs) else "?"
    fig.update_layout(title=f"Study C: weight-decay regimes at xi = {xi}", height=420)
    return fig


def ipr_evolution_figure(runs: pd.DataFrame, seed: int = 0) -> go.Figure:
    """Per xi (one seed): median neuron IPR and the share of neurons with IPR > 0.5, over checkpoints.

    Uses (and caches in each run folder) the registered `ipr` analysis at every checkpoint,
    the same as ``interp evolve --run RUN --analysis ipr``.
    """
    from analyses import get_analysis
    from analyses.evolution import evolve

    analysis = get_analysis("ipr")
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["median neuron IPR", "share of neurons with IPR > 0.5"]
    )
    palette = ["#440154", "#443983", "#31688e", "#21918c", "#35b779", "#90d743", "#fde725"]
    chosen = runs[(runs["seed"] == seed) & runs["run"].map(lambda r: bool(list_checkpoints(r)))]
    for i, row in enumerate(chosen.sort_values("xi").itertuples()):
        frame = evolve(row.run, analysis, analysis.params(), progress=False).to_frame()
        by_step = frame.groupby("step")["ipr"]
        x = np.maximum(by_step.median().index.to_numpy(), 1)
        for col, values in ((1, by_step.median()), (2, by_step.apply(lambda v: float((v > 0.5).mean())))):
            fig.add_scatter(
                x=x,
                y=values.values,
                name=f"xi = {row.xi:g}",
                legendgroup=str(row.xi),
                showlegend=col == 1,
                line_color=palette[i % len(palette)],
                row=1,
                col=col,
                hovertemplate=f"xi {row.xi:g}<br>step %{{x}}<br>%{{y:.3f}}<extra></extra>",
            )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_layout(title=f"Study C: per-neuron Fourier IPR over training (seed {seed})", height=420)
    return fig


def write_study_c(
    sweep_dir: str | Path,
    wd_dir: str | Path | None = None,
    out: str | Path | None = None,
    *,
    ipr: bool = False,
) -> Path:
    """Write the runs and xi tables (CSV, Markdown) and the figures (HTML) into `out` (default SWEEP/study_c).

    Args:
        sweep_dir: Folder of ``interp sweep --grid study-c``.
        wd_dir: Folder of ``interp sweep --grid study-c-wd`` (adds the regimes figure and table).
        out: Output folder.
        ipr: Also draw the IPR evolution of seed 0 at every xi (computes `ipr` per checkpoint).
    """
    out = Path(out) if out else Path(sweep_dir) / "study_c"
    out.mkdir(parents=True, exist_ok=True)
    runs = runs_table(sweep_dir)
    table = xi_table(runs)
    runs.to_csv(out / "runs.csv", index=False)
    table.to_csv(out / "xi_table.csv", index=False)
    (out / "xi_table.md").write_text(markdown_table(table) + "\n")
    figures = {
        "times_vs_xi": times_figure(runs, table),
        "final_accuracy_vs_xi": final_accuracy_figure(runs),
        "training_curves": curves_figure(runs[runs["done"]]),
    }
    if wd_dir is not None:
        wd_runs = runs_table(wd_dir)
        inversions = {r: inversion_curve(r) for r in wd_runs["run"] if list_checkpoints(r)}
        wd_runs["regime"] = [
            regime(t, c) if d else "running"
            for t, c, d in zip(
                wd_runs["final test/acc"], wd_runs["final train/corrupted/acc"], wd_runs["done"]
            )
        ]
        wd_runs["final corrupted true-label acc"] = [
            inversions[r]["corrupted true-label acc"].iloc[-1] if r in inversions else None
            for r in wd_runs["run"]
        ]
        wd_runs.to_csv(out / "wd_runs.csv", index=False)
        figures["wd_regimes"] = wd_figure(wd_runs, inversions)
    if ipr:
        figures["ipr_evolution"] = ipr_evolution_figure(runs[runs["done"]])
    for name, fig in figures.items():
        fig.write_html(out / f"{name}.html", include_plotlyjs="directory")
    return out


def train_seed_major(
    grid_name: str, sweep_dir: str | Path, *, epochs: int | None = None, threads: int = 1
) -> int:
    """Train a study-C grid one run at a time, seed index by seed index (every xi of seed 0 first).

    The same runs, folders and `sweep.json` as ``interp sweep --grid NAME --epochs N --out DIR``
    (either command resumes and completes what the other started); only the order differs, so
    a sweep cut short still covers every xi. Returns the number of runs that failed.
    """
    import dataclasses
    from functools import partial

    from analyses.studies.grids import GRIDS, expand
    from analyses.training import check_specs_memory, train_spec
    from interp.config import to_dict
    from interp.sweep.executors import LocalExecutor
    from interp.sweep.specs import run_sweep, write_sweep

    grid = GRIDS[grid_name]
    if epochs is not None:
        grid = dataclasses.replace(grid, train={**grid.train, "epochs": epochs})
    specs = expand(grid, Path(sweep_dir))
    check_specs_memory(specs)
    write_sweep(sweep_dir, specs, {"grid": to_dict(grid)})
    ordered = sorted(specs, key=lambda s: (s.tags["seed"], specs.index(s)))
    outcomes = run_sweep(ordered, partial(train_spec), LocalExecutor(jobs=1, threads=threads), progress=False)
    return sum(not outcome.ok for outcome in outcomes)
