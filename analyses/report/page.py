"""The HTML report of a results folder (`interp report`): readable at a glance, offline, fast.

The page says in prose and a small table what was run (each sweep's models, what varied,
seeds, data and training, and the command that reruns it), then the milestone rates as
percentages with Wilson 95% intervals (a table and a figure with error bars), then one
collapsible section per run: its state in one line and, when opened, its figure. Run figures
are drawn only when their section opens, so a report of 60 runs loads as fast as one of 6;
plotly.js sits in a file beside the page, so it opens without a network. `rates.csv` and
`runs.csv` hold the same numbers for other tools.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from analyses.report.plots import (
    PLOTLY_JS,
    StepAxis,
    add_step_marker,
    milestone_colour,
    split_colour,
    write_plotly_js,
)
from analyses.report.records import (
    DIVERGED,
    FINISHED,
    NOT_STARTED,
    RunState,
    accuracy_percent,
    config_label,
    configurations,
    format_epoch,
    load_results,
    milestone_rates,
    percent,
    rate_rows,
    rate_table,
    runs_frame,
)
from analyses.report.survival import time_to_milestone_figure
from analyses.report.sweeps import sweep_rows
from interp.store.atomic import atomic_write_text
from interp.store.run_folder import read_config, read_metrics

REPORT_FILE, RATES_FILE, RUNS_FILE = "report.html", "rates.csv", "runs.csv"
SWEEPS_FILE = "sweeps.csv"  # what was run, with the CPU hours the runs recorded
# What study A's milestones mean (docs/study_a.md); other milestones are described by their metric.
MILESTONE_TEXT = {
    "generalized": "adv accuracy 100% at an evaluation (the study's definition; on a binary label "
    "the inverted shortcut also gets there)",
    "rule": "val and adv accuracy both 100% at the same evaluation: the true rule",
    "memorized": "every shortcut-opposing training example right: what a run does instead of the rule",
    "generalized-99": "adv accuracy at least 99% at an evaluation (one wrong example in 2,048 misses 100%)",
    "rule-99": "val and adv accuracy both at least 99% at the same evaluation",
}
Figure = Callable[[Path], go.Figure]


@dataclass(frozen=True)
class ReportSection:
    """What a study adds to the report, through the hook the report exposes (the report imports no study).

    Attributes:
        html: The study's HTML parts from every run of the report, placed after the rates (it may
            write its own CSV files into the output folder, the second argument); ``[]`` when
            none of the runs are the study's.
        markers: Marks on a run's accuracy figure (its figure, step axis, metrics records and run
            config), e.g. study A's phase 2; it returns without marking another study's run.
        evolution: The study's figure of a run over its checkpoints, for ``interp report
            --evolution`` (the run folder, a cache folder for per-step results or None, whether to
            show progress); None for a run that is not the study's.
    """

    html: Callable[[list[RunState], Path], list[str]]
    markers: Callable[[go.Figure, StepAxis, list[dict[str, Any]], dict[str, Any]], None] | None = None
    evolution: Callable[[Path, Path | None, bool], go.Figure | None] | None = None


def study_sections() -> list[ReportSection]:
    """Every study's section (`analyses.studies.REPORT_SECTIONS`), each imported on first use."""
    import importlib

    from analyses.studies import REPORT_SECTIONS

    return [importlib.import_module(module).SECTION for module in REPORT_SECTIONS]


def accuracy_figure(
    run_dir: str | Path,
    milestones: dict[str, dict[str, Any]] | None = None,
    studies: Sequence[ReportSection] | None = None,
) -> go.Figure:
    """Accuracy per split against epochs (log axis, step 0 shown) from a run's metrics, with
    the epochs at which the run reached its `milestones` (a run summary's) marked, and the
    marks the `studies` (default: every study's section) add, such as study A's phase 2.
    """
    run_dir = Path(run_dir)
    records = read_metrics(run_dir)
    splits = list(
        dict.fromkeys(k.split("/")[0] for r in records for k in r if k.count("/") == 1 and k.endswith("/acc"))
    )
    axis = StepAxis([r["step"] for r in records] or [0])
    fig = go.Figure()
    for split in splits:
        scored = [r for r in records if f"{split}/acc" in r]
        fig.add_scatter(
            **axis.trace([r["step"] for r in scored]),
            y=[r[f"{split}/acc"] for r in scored],
            name=split,
            line={"color": split_colour(split)},
            hovertemplate=f"split {split}<br>epoch %{{customdata:,}}<br>accuracy %{{y:.3f}}<extra></extra>",
        )
    reached = [(n, m["step"]) for n, m in (milestones or {}).items() if m["step"] is not None]
    for index, (name, step) in enumerate(reached):
        # Labels stacked downwards: milestones are often reached at the same evaluation.
        add_step_marker(fig, axis, step, name, colour=milestone_colour(name), label_y=1 - 0.09 * index)
    config = read_config(run_dir)
    for section in study_sections() if studies is None else studies:
        if section.markers is not None:
            section.markers(fig, axis, records, config)
    fig.update_xaxes(**axis.layout())
    fig.update_yaxes(title_text="accuracy", range=[-0.02, 1.04])
    fig.update_layout(height=340, margin={"t": 40, "b": 50}, legend={"title": {"text": "split"}})
    return fig


def rates_figure(runs: list[RunState]) -> go.Figure:
    """Milestone rates per configuration (bars, percent) with their Wilson 95% intervals."""
    groups = configurations(runs)
    several = len({key[0] for key in groups}) > 1
    labels = {key: (f"{key[0]}: " if several else "") + config_label(dict(key[1:])) for key in groups}
    fig = go.Figure()
    by_name: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, group in groups.items():
        for rates in milestone_rates(group):
            if rates["finished"]:
                by_name.setdefault(rates["milestone"], []).append((labels[key], rates))
    for name, points in by_name.items():
        rate = [100 * p["rate"] for _, p in points]
        fig.add_bar(
            x=[label for label, _ in points],
            y=rate,
            name=name,
            marker_color=milestone_colour(name),
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [100 * p["ci_high"] - r for (_, p), r in zip(points, rate)],
                "arrayminus": [r - 100 * p["ci_low"] for (_, p), r in zip(points, rate)],
            },
            customdata=[
                [p["reached"], p["finished"], 100 * p["ci_low"], 100 * p["ci_high"]] for _, p in points
            ],
            hovertemplate=f"%{{x}}<br>{name}: %{{customdata[0]}} of %{{customdata[1]}} runs = %{{y:.0f}}%"
            "<br>Wilson 95% interval [%{customdata[2]:.0f}%, %{customdata[3]:.0f}%]<extra></extra>",
        )
    fig.update_layout(
        barmode="group",
        title="Milestone rates per configuration (finished runs; bars: Wilson 95% intervals)",
        yaxis={"title": {"text": "runs that reached it (%)"}, "range": [0, 105]},
        xaxis={"title": {"text": "configuration"}},
        legend={"title": {"text": "milestone"}},
        height=420,
    )
    return fig


def write_report(
    folder: str | Path,
    out: str | Path | None = None,
    *,
    figure: Figure | None = None,
    preface: Sequence[str] = (),
    runs_head: Sequence[str] | None = None,
    title: str | None = None,
    studies: Sequence[ReportSection] | None = None,
) -> Path:
    """Write `report.html`, `rates.csv`, `runs.csv` and `sweeps.csv` (and what the studies' sections
    write, such as study A's `outcomes.csv` and `tests.csv`) for every sweep below `folder`.

    Args:
        folder: A sweep folder, or a folder with sweeps below it; only read.
        out: Where to write (default: `folder`).
        figure: Each run's figure from its folder (default: accuracy curves; `interp report
            --evolution` draws study A's circuit evolution for runs with checkpoints).
        preface: HTML placed first, under the title (`make demo` opens with study A's answer).
        runs_head: HTML that heads the report of `folder`'s own runs, whose headings then go one
            level down (`make demo`: "Your runs"); None: that report is the page.
        title: The page's title (default: "Report: " and the folder's name).
        studies: The studies' sections (default: every study's, `study_sections`).

    Returns:
        The path of `report.html`.
    """
    folder = Path(folder)
    out = Path(out) if out is not None else folder
    studies = study_sections() if studies is None else studies
    sweeps, runs = load_results(folder)
    out.mkdir(parents=True, exist_ok=True)
    rate_table(runs).to_csv(out / RATES_FILE, index=False)
    runs_frame(runs).to_csv(out / RUNS_FILE, index=False)
    write_plotly_js(out)
    swept = sweep_rows(folder, sweeps, runs)
    pd.DataFrame(swept).to_csv(out / SWEEPS_FILE, index=False)
    own = [
        _lead(folder, runs, len(sweeps)),
        "<h2>What was run</h2>",
        html_table(swept, ["sweep"] if len(sweeps) > 1 else []),
        "<h2>Milestone rates</h2>",
        _milestone_list(runs),
        rates_html(rate_rows(runs), several=len(sweeps) > 1),
        figure_div("rates", rates_figure(runs), eager=True),
        "<h2>Time to milestone</h2>",
        "<p>The share of each configuration's runs that had reached a milestone by each epoch: a rate "
        "at one epoch depends on where training stopped, the curve does not. Runs that stopped "
        "without it are censored at their last evaluation (Kaplan-Meier); the menu picks the milestone.</p>",
        figure_div("time-to-milestone", time_to_milestone_figure(runs), eager=True),
        *(part for study in studies for part in study.html(runs, out)),
        *_diverged_html(runs),
        f"<h2>Runs ({len(runs)})</h2>",
        "<p>Open a run to draw its figure.</p>",
        *(_run_section(index, run, figure, studies) for index, run in enumerate(runs)),
    ]
    if runs_head is not None:  # a section of a larger page: its headings one level down
        own = [*runs_head, *(part.replace("<h2>", "<h3>").replace("</h2>", "</h3>") for part in own)]
    title = title or f"Report: {folder.name or folder}"
    body = [f"<h1>{html.escape(title)}</h1>", *preface, *own]
    atomic_write_text(out / REPORT_FILE, _page(title, "\n".join(body)))
    return out / REPORT_FILE


def _diverged_html(runs: list[RunState]) -> list[str]:
    """A section for the runs whose loss or weights became NaN or inf (none: no section)."""
    diverged = [r for r in runs if r.status == DIVERGED]
    if not diverged:
        return []
    items = "".join(
        f"<li><b>{html.escape(config_label(r.config))}, seed {r.spec.tags.get('seed')}</b>: diverged at epoch "
        f"{format_epoch(r.diverged['step'])} ({html.escape(str(r.diverged['tensor']))} is "
        f"{html.escape(str(r.diverged['value']))}); its last finite checkpoint is step "
        f"{format_epoch(r.diverged['checkpoint'])}</li>"
        for r in diverged
    )
    return [f"<h2>Diverged runs ({len(diverged)}; not in the rates)</h2>", f"<ul>{items}</ul>"]


def _lead(folder: Path, runs: list[RunState], n_sweeps: int) -> str:
    counts = {s: sum(r.status == s for r in runs) for s in (FINISHED, DIVERGED, "unfinished", NOT_STARTED)}
    state = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    sweeps = f"{n_sweeps} sweeps" if n_sweeps > 1 else "one sweep"
    return (
        f"<p class='lead'>{len(runs)} runs in {sweeps}: {state}. Rates count finished runs; an "
        "unfinished run shows how far it got. Rebuild this page with "
        f"<code>interp report {html.escape(str(folder))}</code>.</p>"
    )


def _milestone_list(runs: list[RunState]) -> str:
    seen: dict[str, dict[str, Any]] = {}
    for run in runs:
        for name, m in run.milestones.items():
            seen.setdefault(name, m)
    items = [
        f"<li><b>{html.escape(n)}</b>: {html.escape(MILESTONE_TEXT.get(n, _metric_text(m)))}</li>"
        for n, m in seen.items()
    ]
    return (
        "<p>A milestone is reached at the first evaluation where it holds; <i>kept</i> if it still "
        "holds at the last evaluation, <i>transient</i> if not. Rates are percentages of finished "
        "runs with their Wilson 95% intervals.</p><ul>" + "".join(items) + "</ul>"
    )


def _metric_text(m: dict[str, Any]) -> str:
    return f"{m['metric']} at or above {percent(m['threshold'])}"


def rates_html(rows: list[dict[str, str]], *, several: bool) -> str:
    """The rate table (`report.rate_rows`) as HTML: a rate and its when per milestone and configuration."""
    names = list(dict.fromkeys(k for row in rows for k in row if k not in ("sweep", "configuration", "runs")))
    milestones = [n for n in names if not n.endswith(": when")]
    head = "".join(f"<th>{html.escape(n)}</th>" for n in ["configuration", "runs", *milestones])
    body = []
    for row in rows:
        label = (f"{row['sweep']}: " if several else "") + row["configuration"]
        cells = [f"<td>{html.escape(label)}</td>", f"<td class='num'>{html.escape(row['runs'])}</td>"]
        for name in milestones:
            rate, when = row.get(name, "-"), row.get(f"{name}: when", "")
            cells.append(f"<td>{html.escape(rate)}<br><small>{html.escape(when)}</small></td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table class='rates'><tr>{head}</tr>{''.join(body)}</table>"


def html_table(rows: list[dict[str, str]], drop: list[str]) -> str:
    """`rows` (one dict of cell texts each) as an HTML table, without the columns in `drop`."""
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if c not in drop]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(c, row.get(c, ''))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(column: str, value: str) -> str:
    return f"<code>{html.escape(value)}</code>" if column == "command" else html.escape(value)


def _run_section(index: int, run: RunState, figure: Figure | None, studies: Sequence[ReportSection]) -> str:
    title = f"{config_label(run.config)}, seed {run.spec.tags.get('seed', '?')}"
    if run.sweep != ".":
        title = f"{run.sweep}: {title}"
    summary = f"<b>{html.escape(title)}</b> &mdash; {html.escape(run_line(run))}"
    if run.status == NOT_STARTED:
        return f"<details><summary>{summary}</summary><p>No metrics yet.</p></details>"
    fig = accuracy_figure(run.spec.out, run.milestones, studies) if figure is None else figure(run.spec.out)
    fig.update_layout(title=title)
    return (
        f"<details data-figure='fig-{index}'><summary>{summary}</summary>"
        f"{_milestone_table(run)}{figure_div(f'fig-{index}', fig, eager=False)}</details>"
    )


def run_line(run: RunState) -> str:
    """One line on a run: its state, its milestones, its accuracies (final, or best so far)."""
    if run.status == NOT_STARTED:
        return "not started"
    planned = run.spec.train.get("epochs")
    if run.status == FINISHED:
        head = f"finished, {format_epoch(run.epoch)} epochs"
    elif run.status == DIVERGED:
        head = f"diverged at epoch {format_epoch(run.diverged['step'])} ({run.diverged['tensor']})"
    else:
        head = f"unfinished: epoch {format_epoch(run.epoch)}" + (f" of {planned:,}" if planned else "")
    reached = [
        f"{n} at {format_epoch(m['step'])} ({'kept' if m['kept'] else 'transient'})"
        for n, m in run.milestones.items()
        if m["step"] is not None
    ]
    never = [n for n, m in run.milestones.items() if m["step"] is None]
    parts = [head, *reached] + ([f"never {', '.join(never)}"] if never else [])
    accs = {k[:-4]: v for k, v in run.final.items() if k.endswith("/acc") and k.count("/") == 1}
    if accs:
        parts.append("final " + ", ".join(f"{k} {accuracy_percent(v)}" for k, v in accs.items()))
    if run.status != FINISHED and "adv/acc" in run.best:
        parts.append(f"best adv {accuracy_percent(run.best['adv/acc'])}")
    return "; ".join(parts)


def _milestone_table(run: RunState) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td class='num'>{format_epoch(m['step'])}</td>"
        f"<td>{'' if m['step'] is None else ('kept' if m['kept'] else 'transient')}</td></tr>"
        for n, m in run.milestones.items()
    )
    return f"<table class='small'><tr><th>milestone</th><th>epoch</th><th>at the end</th></tr>{rows}</table>"


def figure_div(name: str, fig: go.Figure, *, eager: bool) -> str:
    """A figure's place on the page and its JSON: drawn on load if `eager`, else when its section opens."""
    # JSON inside <script type=application/json>: "</" would end the script element early.
    spec = fig.to_json().replace("</", "<\\/")
    return (
        f"<div class='figure' id='{name}-div'></div>"
        f"<script type='application/json' id='{name}' data-eager='{str(eager).lower()}'>{spec}</script>"
    )


_SCRIPT = """
function draw(id) {
  const spec = JSON.parse(document.getElementById(id).textContent);
  Plotly.newPlot(id + "-div", spec.data, spec.layout, {responsive: true, displaylogo: false});
}
document.querySelectorAll("script[data-eager='true']").forEach(s => draw(s.id));
document.querySelectorAll("details[data-figure]").forEach(d => d.addEventListener("toggle", () => {
  if (d.open && !d.dataset.drawn) { d.dataset.drawn = "1"; draw(d.dataset.figure); }
}));
"""
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1250px; margin: 2em auto; padding: 0 1em; color: #222; }
.lead { font-size: 1.1em; } table { border-collapse: collapse; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; } small { color: #555; }
table.small { font-size: 0.9em; } details { border-bottom: 1px solid #ddd; padding: 0.4em 0; }
summary { cursor: pointer; } code { background: #f5f5f5; padding: 0 0.2em; }
"""


def _page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style><script src='{PLOTLY_JS}'></script></head>"
        f"<body>{body}<script>{_SCRIPT}</script></body></html>"
    )
