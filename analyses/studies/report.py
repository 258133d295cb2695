"""Sweep reports: rates per configuration with Wilson intervals, and every run's evolution.

`rate_table` groups a sweep's runs by their coordinates (all tags but the seed) and, for each
milestone the task defines (study A: ``generalized``; study C: ``t_mem_clean``, ``t_gen``...),
counts the runs that reached it, the fraction with its Wilson 95% interval, how many still held
it at the end (kept vs transient), and the median epoch at which it was reached.
Runs that diverged (their `DONE` records ``diverged``: a NaN or inf weight or loss) are listed
apart: they are counted in the ``diverged`` column, left out of the rates, and shown in their
own table with the epoch and tensor where they diverged. `write_report` writes `report.html`
(the tables, then each run's evolution figure), `rates.csv` and `runs.csv` into the sweep
folder, or into `out`: the sweep folder is then only read, so it may be read-only.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from scipy.stats import binomtest

from interp.store.atomic import atomic_write_text
from interp.store.run_folder import is_done, read_done, read_metrics
from interp.sweep.specs import RunSpec, read_sweep

REPORT_FILE, RATES_FILE, RUNS_FILE = "report.html", "rates.csv", "runs.csv"


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy's implementation)."""
    if n == 0:
        return float("nan"), float("nan")
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return ci.low, ci.high


def runs_frame(specs: list[RunSpec]) -> pd.DataFrame:
    """One row per run: its tags, status, final accuracies and milestones."""
    rows = []
    for spec in specs:
        row: dict[str, Any] = {**spec.tags, "run": str(spec.out), "done": is_done(spec.out)}
        row["status"] = "unfinished"
        if row["done"]:
            summary = read_done(spec.out)
            row["status"] = "diverged" if "diverged" in summary else "finished"
            if "diverged" in summary:
                row |= {
                    "diverged epoch": summary["diverged"]["step"],
                    "diverged tensor": summary["diverged"]["tensor"],
                }
            row |= {
                f"final {k}": v
                for k, v in summary["final"].items()
                if k.endswith("/acc") and k.count("/") == 1
            }
            for name, m in summary["milestones"].items():
                row |= {f"{name} epoch": m["step"], f"{name} kept": m["kept"]}
        rows.append(row)
    return pd.DataFrame(rows)


def rate_table(specs: list[RunSpec]) -> pd.DataFrame:
    """Per configuration (tags but seed) and milestone: n, reached, rate, Wilson CI, kept, median epoch."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    keys = [k for k in (specs[0].tags if specs else {}) if k != "seed"]
    for spec in specs:
        summary = read_done(spec.out) if is_done(spec.out) else None
        groups[tuple(spec.tags.get(k) for k in keys)].append(summary)
    rows = []
    for coords, summaries in groups.items():
        finished = [s for s in summaries if s is not None and "diverged" not in s]
        done = [s for s in summaries if s is not None]
        diverged = len(done) - len(finished)
        milestones = done[0]["milestones"] if done else {}  # a group of diverged runs still has a row
        for name in milestones:
            steps = [s["milestones"][name]["step"] for s in finished]
            reached = [x for x in steps if x is not None]
            low, high = wilson(len(reached), len(finished))
            rows.append(
                {
                    **dict(zip(keys, coords)),
                    "milestone": name,
                    "runs": len(summaries),
                    "finished": len(finished),
                    "diverged": diverged,
                    "reached": len(reached),
                    "rate": len(reached) / len(finished) if finished else float("nan"),
                    "ci_low": low,
                    "ci_high": high,
                    "kept": sum(
                        s["milestones"][name]["kept"]
                        for s in finished
                        if s["milestones"][name]["step"] is not None
                    ),
                    "median epoch": statistics.median(reached) if reached else None,
                }
            )
    return pd.DataFrame(rows)


def accuracy_figure(run_dir: Path) -> go.Figure:
    """Accuracy per split against epochs (log x) from a run's metrics."""
    records = read_metrics(run_dir)
    steps = [max(r["step"], 1) for r in records]
    splits = sorted({k.split("/")[0] for r in records for k in r if k.count("/") == 1 and k.endswith("/acc")})
    fig = go.Figure(
        [
            go.Scatter(
                x=steps,
                y=[r.get(f"{s}/acc") for r in records],
                name=s,
                hovertemplate=f"{s}<br>epoch %{{x}}<br>acc %{{y:.3f}}",
            )
            for s in splits
        ]
    )
    fig.update_layout(
        title=str(run_dir), xaxis={"type": "log", "title": "epoch"}, yaxis={"title": "accuracy"}, height=320
    )
    return fig


def write_report(sweep_dir: str | Path, *, figure=accuracy_figure, out: str | Path | None = None) -> Path:
    """Write `report.html`, `rates.csv` and `runs.csv` into `out` (default: the sweep folder).

    Args:
        sweep_dir: A folder written by `interp sweep` (only read when `out` is given).
        figure: The per-run figure (default: accuracy curves; `interp sweep` passes the
            circuit-evolution figure for study A runs).
        out: Where the report goes (created if needed).

    Returns:
        The path of `report.html`.
    """
    sweep_dir = Path(sweep_dir)
    folder = Path(out) if out is not None else sweep_dir
    folder.mkdir(parents=True, exist_ok=True)
    specs, meta = read_sweep(sweep_dir)
    rates, runs = rate_table(specs), runs_frame(specs)
    rates.to_csv(folder / RATES_FILE, index=False)
    runs.to_csv(folder / RUNS_FILE, index=False)
    diverged = runs[runs["status"] == "diverged"] if len(runs) else runs
    parts = [
        f"<h1>Sweep report: {html.escape(str(sweep_dir))}</h1>",
        f"<pre>{html.escape(str(meta))}</pre>",
        "<h2>Rates per configuration (Wilson 95% intervals)</h2>",
        rates.to_html(index=False, float_format="%.3f"),
        f"<h2>Diverged runs ({len(diverged)}; not in the rates)</h2>",
        diverged.to_html(index=False, float_format="%.3f") if len(diverged) else "<p>none</p>",
        "<h2>Runs</h2>",
        runs.to_html(index=False, float_format="%.3f"),
        "<h2>Evolution of every run</h2>",
    ]
    for spec in specs:
        if is_done(spec.out):
            parts.append(figure(spec.out).to_html(full_html=False, include_plotlyjs=False))
    plotly_js = '<script src="plotly.min.js"></script>'
    _write_plotly_js(folder)
    page = f"<!DOCTYPE html><html><head><meta charset='utf-8'>{plotly_js}</head><body>{''.join(parts)}</body></html>"
    atomic_write_text(folder / REPORT_FILE, page)
    return folder / REPORT_FILE


def _write_plotly_js(folder: Path) -> None:
    """Put plotly.js beside the report once, so it opens offline."""
    from plotly.offline import get_plotlyjs

    target = folder / "plotly.min.js"
    if not target.exists():
        atomic_write_text(target, get_plotlyjs())
