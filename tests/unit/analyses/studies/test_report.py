"""Reports of results folders: several sweeps, unfinished runs, rates with Wilson intervals,
the markdown table docs quote, read-only input, and a page that stays light with 60 runs.

The results folders are synthetic: run folders with only config.json, metrics.jsonl and (once
finished) DONE, as committed results hold them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from analyses.grids import Grid, expand
from analyses.report.page import run_line, write_report
from analyses.report.records import (
    FINISHED,
    NOT_STARTED,
    UNFINISHED,
    format_epoch,
    format_rate,
    load_results,
    rate_markdown,
    rate_table,
    wilson,
)
from analyses.report.sweeps import sweep_command
from interp.config import to_dict
from interp.metrics import milestones
from interp.store.run_folder import write_compute
from interp.sweep.specs import write_sweep
from tasks import MPSPTask

TASK = {"vocab": 12, "n": 4, "n_train": 64, "n_val": 16, "n_adv": 16}


def _records(adv_at: int | None, val_at: int | None, memorize_at: int | None, epochs: int, lose_at=None):
    """An evaluation every 100 epochs: adv, val and opposing-train accuracy jump to 1 at the given epochs."""
    records = []
    for step in range(0, epochs + 1, 100):
        adv = 1.0 if adv_at is not None and step >= adv_at and (lose_at is None or step < lose_at) else 0.1
        val = 1.0 if val_at is not None and step >= val_at else 0.9
        opposing = 1.0 if memorize_at is not None and step >= memorize_at else 0.5
        records.append(
            {"step": step, "train/acc": 0.95, "train/opposing/acc": opposing, "val/acc": val, "adv/acc": adv}
        )
    return records


def _write_run(spec, records, *, done: bool) -> None:
    spec.out.mkdir(parents=True)
    config = {"format_version": 1, "model": spec.model, "task": spec.task, "train": spec.train}
    (spec.out / "config.json").write_text(json.dumps(config))
    (spec.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if done:
        summary = {"epochs": records[-1]["step"], "final": records[-1]}
        summary["milestones"] = milestones(records, MPSPTask.milestones)
        (spec.out / "DONE").write_text(json.dumps({"format_version": 1, **summary}))


def _sweep(folder: Path, grid: Grid):
    specs = expand(grid, folder)
    write_sweep(folder, specs, {"grid": to_dict(grid)})
    return specs


# Per seed of the grid's two-layer cell: (adv 100% at, val 100% at, memorized at, adv lost at).
TWO_LAYER = [(300, 200, None, None), (500, 500, None, 800), (400, None, 100, None), (None, None, 100, None)]


@pytest.fixture
def results(tmp_path) -> Path:
    """results/search-1: 2 runs (one found the rule, one unfinished); results/grid: 2 cells x 4 seeds
    (one seed of the 1L1H cell never started).
    """
    root = tmp_path / "results"
    train = {"epochs": 1000, "eval_every": 100}
    search = _sweep(
        root / "search-1", Grid(presets=("mpsp-2l2h",), task=TASK, train=train, axes={"r": [0.9]}, seeds=2)
    )
    _write_run(search[0], _records(300, 300, None, 1000), done=True)
    _write_run(search[1], _records(None, None, 200, 400), done=False)
    grid = Grid(presets=("mpsp-1l1h", "mpsp-2l2h"), task=TASK, train=train, axes={"r": [0.9]}, seeds=4)
    for spec in _sweep(root / "grid", grid):
        seed = spec.tags["seed"]
        if spec.tags["preset"] == "mpsp-2l2h":
            adv, val, mem, lose = TWO_LAYER[seed]
            _write_run(spec, _records(adv, val, mem, 1000, lose), done=True)
        elif seed < 3:
            _write_run(spec, _records(None, None, 100 * (seed + 1), 1000), done=True)
    return root


def _row(table, sweep, preset, milestone):
    rows = table[(table.sweep == sweep) & (table.preset == preset) & (table.milestone == milestone)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_rates_count_finished_runs_with_wilson_intervals_kept_and_median_epoch(results):
    sweeps, runs = load_results(results)
    assert [s.name for s in sweeps] == ["grid", "search-1"]
    table = rate_table(runs)
    generalized = _row(table, "grid", "mpsp-2l2h", "generalized")
    assert (generalized.runs, generalized.finished, generalized.reached) == (4, 4, 3)
    assert (generalized.kept, generalized.transient) == (2, 1)  # seed 1 lost adv 100% at epoch 800
    assert generalized["median epoch"] == 400
    assert (generalized.ci_low, generalized.ci_high) == pytest.approx(wilson(3, 4))
    rule = _row(table, "grid", "mpsp-2l2h", "rule")
    assert (rule.reached, rule.kept, rule.transient, rule["median epoch"]) == (2, 1, 1, 400)
    one_layer = _row(table, "grid", "mpsp-1l1h", "memorized")
    assert (one_layer.runs, one_layer.finished, one_layer.reached) == (4, 3, 3)
    never = _row(table, "grid", "mpsp-1l1h", "rule")
    assert never.reached == 0 and pd.isna(never["median epoch"])  # "never" in the report
    search = _row(table, "search-1", "mpsp-2l2h", "rule")
    assert (search.runs, search.finished, search.reached) == (2, 1, 1)


def test_unfinished_and_never_started_runs_say_how_far_they_got(results):
    _, runs = load_results(results)
    by_status = {
        status: [r for r in runs if r.status == status] for status in (FINISHED, UNFINISHED, NOT_STARTED)
    }
    assert [len(v) for v in by_status.values()] == [8, 1, 1]
    unfinished = by_status[UNFINISHED][0]
    assert unfinished.epoch == 400 and unfinished.best["adv/acc"] == pytest.approx(0.1)
    assert unfinished.milestones["memorized"]["step"] == 200  # from the metrics so far
    line = run_line(unfinished)
    assert "unfinished: epoch 400 of 1,000" in line and "best adv 10%" in line and "memorized at 200" in line
    assert run_line(by_status[NOT_STARTED][0]) == "not started"


def test_formatting_is_for_readers():
    assert format_rate(7, 10) == "70% [40%, 89%], 10 runs"
    assert format_rate(1, 1) == "100% [21%, 100%], 1 run"
    assert format_rate(0, 0) == "no finished run yet"
    assert format_epoch(None) == "never" and format_epoch(float("nan")) == "never"
    assert format_epoch(4200) == "4,200"


def test_the_markdown_table_is_the_reports_table(results, tmp_path):
    markdown = rate_markdown(results)
    lines = markdown.strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:5] == ["sweep", "configuration", "runs", "generalized", "generalized: when"]
    assert "rule" in header and "memorized" in header
    assert len(lines) == 2 + 3  # header, rule, 3 configurations
    grid_2l = next(line for line in lines if line.startswith("| grid | mpsp-2l2h, r = 0.9 |"))
    assert "| 75% [30%, 95%], 4 runs | 2 kept, 1 transient; median epoch 400 |" in grid_2l
    assert "| 4 (1 unfinished) |" in next(line for line in lines if "mpsp-1l1h" in line)
    # How a docs test uses it: a page quotes the table verbatim, and the test rebuilds it from the
    # records; once a record changes (here a finished run loses its DONE), the quote is stale.
    page = "# Rates\n\nRebuilt by `interp report results`:\n\n" + markdown + "\nMore text.\n"
    changed = tmp_path / "changed"
    shutil.copytree(results, changed)
    next(changed.rglob("DONE")).unlink()
    assert rate_markdown(changed) != markdown and rate_markdown(changed) not in page
    # The report shows every rate cell the markdown has (and there are some to show).
    report = write_report(results, tmp_path / "out").read_text()
    cells = re.findall(r"\| (\d+% \[\d+%, \d+%\], \d+ runs?) \|", markdown)
    assert len(cells) >= 3
    for cell in cells:
        assert cell in report
    assert "NaN" not in markdown + report and "nan" not in markdown


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


def test_report_of_a_read_only_folder_writes_only_where_out_says(results, tmp_path):
    before = _snapshot(results)
    for path in [results, *results.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        path = write_report(results, tmp_path / "elsewhere")
    finally:
        for p in [results, *results.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)
    assert path == tmp_path / "elsewhere" / "report.html"
    assert {p.name for p in path.parent.iterdir()} == {
        "report.html",
        "rates.csv",
        "runs.csv",
        "sweeps.csv",
        "outcomes.csv",
        "tests.csv",
        "plotly.min.js",
    }
    assert _snapshot(results) == before


def test_a_single_sweep_reports_into_its_folder_by_default(results):
    path = write_report(results / "grid")
    assert path == results / "grid" / "report.html"
    text = path.read_text()
    assert "What was run" in text and "search-1" not in text


def test_sixty_runs_load_one_figure_and_open_the_others_on_demand(tmp_path):
    grid = Grid(
        presets=("mpsp-1l1h", "mpsp-2l2h"),
        task=TASK,
        train={"epochs": 1000},
        axes={"r": [0.5, 0.9, 0.15]},
        seeds=10,
    )
    for index, spec in enumerate(_sweep(tmp_path / "sixty", grid)):
        _write_run(spec, _records(100 * (index % 11) or None, None, 100, 1000), done=True)
    text = write_report(tmp_path / "sixty").read_text()
    assert text.count("<details data-figure=") == 60
    # Only the rates and the time-to-milestone figures are drawn on load (no vocabulary map here).
    assert text.count("data-eager='true'>") == 2
    assert len(text) < 3_000_000
    assert "NaN" not in text


def test_the_command_names_the_grid_and_its_overrides():
    from dataclasses import replace

    from analyses.studies.grids import GRIDS

    named = GRIDS["demo"]
    demo = to_dict(replace(named, seeds=named.seeds + 1, train={**named.train, "epochs": 200}))
    expected = f"interp sweep --grid demo --seeds {named.seeds + 1} --epochs 200 --out runs/demo"
    assert sweep_command(demo, "runs/demo") == expected
    odd = {**demo, "presets": ["mpsp-2l1h"]}
    assert sweep_command(odd, "x").startswith("interp sweep --grid GRID.json --out x")


def test_study_a_report_writes_outcomes_tests_and_the_vocabulary_map(tmp_path):
    """Two vocabularies x two ratios x two models: the outcomes, the preregistered tests (their
    counts from the runs' metrics) and the map reach the page and its CSV files; a DONE written
    before the 99% milestones existed still gets them, from the metrics.
    """
    root = tmp_path / "results"
    grid = Grid(
        presets=("mpsp-1l1h", "mpsp-2l2h"),
        task=TASK,
        train={"epochs": 1000, "eval_every": 100},
        axes={"vocab": [12, 16], "r": [0.9, 0.5]},
        seeds=3,
    )
    for spec in _sweep(root / "map", grid):
        two, high, seed = spec.tags["preset"] == "mpsp-2l2h", spec.tags["r"] == 0.9, spec.tags["seed"]
        found = (two == high) and seed < (2 if spec.tags["vocab"] == 16 else 1)
        _write_run(spec, _records(300 if found else None, 300 if found else None, 100, 1000), done=True)
        done = json.loads((spec.out / "DONE").read_text())
        done["milestones"] = {k: v for k, v in done["milestones"].items() if not k.endswith("-99")}
        (spec.out / "DONE").write_text(json.dumps(done))
    _, runs = load_results(root)
    assert all("rule-99" in r.milestones for r in runs)
    out = tmp_path / "report"
    page = write_report(root, out).read_text()
    outcomes = pd.read_csv(out / "outcomes.csv")
    row = outcomes[outcomes.configuration == "mpsp-2l2h, vocab = 16, r = 0.9"].iloc[0]
    assert (row["rule kept"], row["memorised without the rule"], row["finished"]) == (2, 1, 3)
    tests = pd.read_csv(out / "tests.csv")
    # The map preregistered no test: its contrasts are exploratory, in the tests' directions.
    assert set(tests.reading) == {"exploratory contrast"} and set(tests.test) == {"-"}
    two = tests[tests.configuration == "mpsp-2l2h, vocab = 16"].iloc[0]
    assert (two["r = 0.9"], two["r = 0.5"], two.alternative) == ("2/3", "0/3", "rate at r = 0.9 > r = 0.5")
    one = tests[tests.configuration == "mpsp-1l1h, vocab = 12"].iloc[0]
    assert (one["r = 0.9"], one["r = 0.5"], one.alternative) == ("0/3", "1/3", "rate at r = 0.9 < r = 0.5")
    assert "<h2>Preregistered tests</h2>" not in page
    for heading in ("Time to milestone", "Outcomes", "Exploratory contrasts", "Rule rate against vocabulary"):
        assert f"<h2>{heading}</h2>" in page


def test_cpu_hours_are_summed_from_the_runs_compute_records(results, tmp_path):
    """A run's CPU time comes from the ``compute.json`` that training writes or, for runs trained
    without one, that `scripts/export_results.py --cpu-ledger` writes (never over training's own);
    the sweep table says how many runs record it.
    """
    import subprocess
    import sys

    from analyses.report.sweeps import sweep_rows

    sweeps, runs = load_results(results)
    grid = next(s for s in sweeps if s.name == "grid")
    assert sweep_rows(results, [grid], runs)[0]["CPU hours"] == "not recorded"
    first, second = grid.specs[0].out, grid.specs[1].out
    write_compute(first, 5400.0, "process CPU time")
    ledger = tmp_path / "ledger.json"
    sampled = {run.relative_to(results / "grid").as_posix(): 1800.0 for run in (first, second)}
    ledger.write_text(json.dumps({**sampled, "_last": {}}))
    dest = tmp_path / "exported"
    script = Path(__file__).parents[4] / "scripts" / "export_results.py"
    subprocess.run([sys.executable, script, results / "grid", dest, "--cpu-ledger", ledger], check=True)
    assert (
        json.loads((dest / second.relative_to(results / "grid") / "compute.json").read_text())["cpu_seconds"]
        == 1800
    )
    assert (
        json.loads((dest / first.relative_to(results / "grid") / "compute.json").read_text())["cpu_seconds"]
        == 5400
    )
    exported_sweeps, exported_runs = load_results(dest)
    row = sweep_rows(dest, exported_sweeps, exported_runs)[0]
    assert row["CPU hours"] == f"2.00 (2 of {len(grid.specs)} runs recorded)"
    write_report(dest, tmp_path / "report")
    assert pd.read_csv(tmp_path / "report" / "sweeps.csv")["CPU hours"][0] == row["CPU hours"]


def test_the_demo_draws_its_own_phase2_run_or_the_committed_series(tmp_path):
    # What the demo's answer says of the committed grids: tests/unit/analyses/studies/test_demo.py.
    from analyses.studies.study_a.demo import SERIES, phase2_run

    results = tmp_path / "results"
    demo = Grid(presets=("mpsp-1l1h", "mpsp-2l2h"), task=TASK, train={"epochs": 1000}, axes={"r": [0.5, 0.9]})
    specs = _sweep(tmp_path / "demo", demo)
    for spec in specs:
        _write_run(spec, _records(None, None, 100, 1000), done=True)
    assert phase2_run(tmp_path / "demo", results)[0] is None
    (results / SERIES).mkdir(parents=True)
    (results / SERIES / "config.json").write_text("{}")
    run, text = phase2_run(tmp_path / "demo", results)
    assert run == results / SERIES and "did not reach the rule" in text
    own = next(s for s in specs if s.tags["preset"] == "mpsp-2l2h" and s.tags["r"] == 0.9)
    (own.out / "DONE").unlink()  # now unfinished, with the rule reached at epoch 400 so far
    records = _records(400, 400, 100, 1000)
    (own.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run, text = phase2_run(tmp_path / "demo", results)
    assert run == own.out and "reached the rule at epoch 400" in text


@pytest.mark.parametrize(
    "value, text",
    [
        (1.0, "100%"),
        (0.9996, "99.9%"),
        (0.997, "99.7%"),
        (0.658, "66%"),
        (0.004, "0.4%"),
        (0.0001, "0.1%"),
        (0.0, "0%"),
    ],
)
def test_run_accuracies_never_round_onto_100_or_0_percent(value, text):
    from analyses.report.records import accuracy_percent

    assert accuracy_percent(value) == text


def test_the_demo_reads_the_committed_records_of_this_checkout():
    # The default the demo, the tutorials and the docs front page read (moving the module once
    # pointed it one folder too deep, where nothing is: the demo would have shown no results).
    from analyses.studies.study_a.demo import CONFIRMATION, RESULTS, SERIES

    assert RESULTS == Path(__file__).resolve().parents[4] / "results" / "study-a"
    assert all((RESULTS / grid).is_dir() for grid in CONFIRMATION) and (RESULTS / SERIES / "DONE").is_file()
