"""The pages a researcher opens, rendered in headless Chromium: the demo-shaped sweep report,
a circuit-evolution figure, the checkpoint explorer and a docs tutorial page. Each must raise no
JavaScript error, and every axis of every figure must cover its data (read from the live plotly
objects, see `tests.browser.checks`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analyses.report.plots import write_figure
from analyses.studies.study_a.evolution import attention_explorer, circuit_evolution_figure
from interp.cli import main

ROOT = Path(__file__).resolve().parents[2]
# The demo grid's shape (1 vs 2 layers, r = 0.5 vs 0.9), one seed, tiny data and training.
GRID = {
    "presets": ["mpsp-1l1h", "mpsp-2l2h"],
    "task": {"vocab": 8, "n_train": 256, "n_val": 64, "n_adv": 64},
    "train": {"epochs": 16, "eval_every": 4, "checkpoint_log_points": 4},
    "axes": {"r": [0.5, 0.9]},
    "seeds": 1,
}


def _cli(*args) -> None:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    assert info.value.code == 0


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A demo-shaped sweep, trained, with its report (circuit evolution per run) written."""
    folder = tmp_path_factory.mktemp("demo")
    (folder / "grid.json").write_text(json.dumps(GRID))
    _cli("sweep", "--grid", folder / "grid.json", "--out", folder / "out", "--jobs", "1", "--no-progress")
    _cli("report", folder / "out", "--evolution", "--no-progress")
    return folder / "out"


@pytest.fixture(scope="module")
def demo_page(sweep, tmp_path_factory) -> Path:
    """The demo's own report of that sweep, as `make demo` writes it: study A's answer from this
    checkout's committed grids first; the phase-2 series is the sweep's two-layer run (a tiny
    one, so the page is drawn in seconds), then "Your runs".
    """
    from analyses.studies.study_a.cli import demo_report
    from analyses.studies.study_a.demo import RESULTS, SERIES, SHOWN

    demo = tmp_path_factory.mktemp("own") / "demo"  # a copy: the sweep's own report.html stays
    shutil.copytree(sweep, demo)
    results = tmp_path_factory.mktemp("results")
    for name in SHOWN:
        if (RESULTS / name).is_dir():
            (results / name).symlink_to(RESULTS / name)
    (results / SERIES).parent.mkdir(parents=True)
    (results / SERIES).symlink_to(_two_layer_run(demo))
    return demo_report(demo, progress=False, results=results)


def _two_layer_run(sweep: Path) -> Path:
    return next(
        p.parent for p in sorted(sweep.rglob("config.json")) if "mpsp-2l2h" in str(p) and "r=0.9" in str(p)
    )


def test_the_sweep_report_with_every_run_opened(sweep, page):
    page.open(sweep / "report.html")
    page.assert_clean(min_figures=1)  # the rates figure is drawn at once
    closed = page.page.evaluate("() => document.querySelectorAll('details[data-figure]').length")
    assert closed == 4, "one collapsible section with a figure per run"
    page.page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    page.page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 5")
    page.wait_for_plots()
    page.assert_clean(min_figures=5)


def test_the_demo_report_with_every_run_opened(demo_page, page):
    page.open(demo_page)
    # Drawn at once: the committed grids' time-to-rule curves and the map, the phase-2 run, the
    # demo's own rates and time-to-milestone.
    page.assert_clean(min_figures=6)
    first = page.page.evaluate("() => document.querySelector('h2').textContent")
    assert first == "Study A's answer at CPU scale (committed results)"
    closed = page.page.evaluate("() => document.querySelectorAll('details[data-figure]').length")
    assert closed == 4, "one collapsible section with a figure per run of the demo"
    drawn = page.page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length")
    page.page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    page.page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length >= {drawn + 4}")
    page.wait_for_plots()
    page.assert_clean(min_figures=drawn + 4)


def test_a_circuit_evolution_figure(sweep, page, tmp_path):
    path = write_figure(circuit_evolution_figure(_two_layer_run(sweep)), tmp_path / "evolution.html")
    page.open(path).assert_clean(min_figures=1)
    layout = page.page.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.xaxis.type")
    assert layout == "log"


def test_the_explorer_at_its_first_and_last_checkpoint(sweep, page, tmp_path):
    path = write_figure(attention_explorer(_two_layer_run(sweep)), tmp_path / "explorer.html")
    page.open(path).assert_clean(min_figures=1)
    labels = page.page.evaluate(
        "() => document.querySelector('.js-plotly-plot')._fullLayout.sliders[0].steps.map(s => s.label)"
    )
    assert len(labels) >= 3
    # Move to the last checkpoint as the slider would, then check the axes of what is shown.
    page.page.evaluate(
        """async () => {
          const gd = document.querySelector('.js-plotly-plot');
          const last = gd._fullLayout.sliders[0].steps.at(-1).args[0][0];
          const now = {frame: {duration: 0, redraw: true}, transition: {duration: 0}, mode: 'immediate'};
          await Plotly.animate(gd, [last], now);
        }"""
    )
    page.assert_clean(min_figures=1)


# Builds and executes a tutorial (~100 s on 2 cores): `make test-slow`, which CI also runs.
@pytest.mark.slow
def test_a_docs_tutorial_page(tmp_path, page):
    """The study-A tutorial, executed at tiny scale and built with the docs' own configuration."""
    source = tmp_path / "src"
    (source / "tutorials").mkdir(parents=True)
    (source / "tutorials" / "study_a.md").write_text((ROOT / "docs" / "tutorials" / "study_a.md").read_text())
    (source / "index.md").write_text("# interp\n\n```{toctree}\ntutorials/study_a\n```\n")
    env = {**os.environ, "INTERP_DOCS_TINY": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "sphinx", "-q", "-b", "html", "-c", str(ROOT / "docs")]
    # Only the notebook extension: the page alone, without the generated API and CLI pages.
    command += [
        "-D",
        "extensions=myst_nb",
        "-D",
        "nb_execution_mode=force",
        str(source),
        str(tmp_path / "html"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    page.open(tmp_path / "html" / "tutorials" / "study_a.html")
    page.assert_clean(min_figures=2)  # the circuit-evolution figure and the explorer
    text = page.page.inner_text("article")
    for shown in ("Traceback", "Warning", str(ROOT), str(tmp_path)):
        assert shown not in text, f"the page shows {shown!r}"


def test_the_mechanism_figure(page, tmp_path):
    """Study A's mechanism test: three panels on one log epoch axis, an onset diamond per panel."""
    from analyses.studies.study_a.mechanism import MechanismResult, Params, RunSeries

    def series(label: str, shortcut: str, onset: int | None, accuracy: list[float]) -> RunSeries:
        steps = [0, 1, 10, 100, 1000, 1500]
        base = {"steps": steps, "shuffled_mean": [0.5] * 6, "shuffled_high": [0.7] * 6}
        return RunSeries(
            label, shortcut, 32, onset, None, {**base, "all": accuracy, "top": accuracy, "bottom": accuracy}
        )

    result = MechanismResult.from_runs(
        [
            series("first, vocab 32, seed_0", "first", 400, [0.5, 0.5, 0.8, 0.95, 1.0, 1.0]),
            series("max, vocab 32, seed_0", "max", None, [0.5, 0.5, 0.6, 0.6, 0.7, 0.7]),
        ],
        Params(),
    )
    path = write_figure(result.figure(), tmp_path / "mechanism.html")
    page.open(path).assert_clean(min_figures=1)
    layout = page.page.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.xaxis.type")
    assert layout == "log"


def test_study_as_answer_figure(page, tmp_path):
    """The rule rate by r per model and weight decay, from the committed records (the study page's
    top figure): every line and its Wilson bars inside the axes, the legend below them.
    """
    from analyses.studies.study_a.figures import rule_rate_figure

    fig = rule_rate_figure()
    path = write_figure(fig, tmp_path / "answer.html")
    page.open(path).assert_clean(min_figures=1)
    traces = page.page.evaluate("() => document.querySelector('.js-plotly-plot')._fullData.length")
    assert traces == len(fig.data) >= 2
    legend = page.page.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.legend.y")
    assert legend < 0  # below the plotting area: beside it, the long names squeeze the axes
