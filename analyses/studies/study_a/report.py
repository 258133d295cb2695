"""Study A's part of `interp report`: its outcomes, preregistered tests, crossed design and
vocabulary map (with `outcomes.csv` and `tests.csv`), and phase 2 marked on its runs' figures.

The report imports no study: it takes `SECTION` through its hook
(`analyses.report.page.ReportSection`, listed in `analyses.studies.REPORT_SECTIONS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from analyses.report.page import ReportSection, figure_div, html_table
from analyses.report.plots import StepAxis
from analyses.report.records import RunState, percent
from analyses.studies.study_a.stats import (
    axis_rate_figure,
    axis_rates,
    crossed_shares,
    outcome_table,
    report_tests,
)

OUTCOMES_FILE, TESTS_FILE = "outcomes.csv", "tests.csv"  # written for study A's runs only


def study_a_html(runs: list[RunState], out: Path, *, tests: bool = True) -> list[str]:
    """Study A's outcomes, its preregistered tests and its vocabulary map (`analyses.studies.study_a.stats`), with
    `outcomes.csv` and `tests.csv`; nothing for other studies' runs. Without `tests`, no contrast
    test and no `tests.csv` (`make demo`'s own runs: one seed a cell, nothing preregistered).
    """
    if not any(r.spec.task.get("name") == "mpsp" for r in runs):
        return []
    outcomes = outcome_table(runs)
    outcomes.to_csv(out / OUTCOMES_FILE, index=False)
    parts = [
        "<h2>Outcomes</h2>",
        "<p>One outcome per finished run, the first that applies: the rule kept to the end or "
        "transient, the opposing examples memorised without the rule, the inverted shortcut (final "
        "val &le; 10%, adv &ge; 90%), the shortcut only (val &ge; 90%, adv &le; 10%), other.</p>",
        html_table([{k: str(v) for k, v in row.items()} for row in outcomes.to_dict("records")], ["sweep"]),
    ]
    if tests:
        parts += tests_html(runs, out)
    crossed = pd.concat([crossed_shares(runs).assign(milestone="rule"), _crossed_99(runs)])
    if len(crossed):
        parts += [
            "<h2>Data or initialisation?</h2>",
            "<p>In a crossed design (every training set with every initialisation), the share of the "
            "variation of reaching the rule that each factor explains (two-way, without interaction; "
            "the rest needs both together), on the 100% rule and its 99% variant.</p>",
            html_table(
                [{k: _share(v) for k, v in row.items()} for row in crossed.to_dict("records")], ["sweep"]
            ),
        ]
    vocab = axis_rates(runs, "vocab")
    if len(vocab) and vocab.groupby("line")["vocab"].nunique().max() > 1:
        parts += [
            "<h2>Rule rate against vocabulary</h2>",
            figure_div("map", axis_rate_figure(runs), eager=True),
        ]
    return parts


def tests_html(runs: list[RunState], out: Path) -> list[str]:
    """The contrast tests of `runs` (`stats.report_tests`): preregistered, then exploratory, with `tests.csv`."""
    parts: list[str] = []
    tests = [t.row() for t in report_tests(runs)]
    pd.DataFrame(tests).to_csv(out / TESTS_FILE, index=False)
    preregistered = [row for row in tests if row["reading"] != "exploratory contrast"]
    exploratory = [row for row in tests if row["reading"] == "exploratory contrast"]
    if preregistered:
        parts += [
            "<h2>Preregistered tests</h2>",
            "<p>The rule rate at r = 0.9 against r = 0.5 (finished runs) in the sweeps whose tests "
            "were fixed before they ran (the headline, the weight-decay headline, the replication): "
            "greater for two layers (the primary test), less for one layer (the secondary); "
            "one-sided Fisher exact tests, and Newcombe's 95% interval for the difference of the "
            "rates. The 99% rows are their robustness reading (one wrong adversarial example in "
            "2,048 misses the 100% rule).</p>",
            html_table([test_cells(row) for row in preregistered], []),
        ]
    if exploratory:
        parts += [
            "<h2>Exploratory contrasts</h2>",
            "<p>The same contrast in sweeps that fixed no test in advance (the vocabulary map, its "
            "one-layer cells, ...): a description, not a test.</p>",
            html_table([test_cells(row) for row in exploratory], []),
        ]
    return parts


def _share(value: Any) -> str:
    if value is None or value != value:  # None, or NaN where pandas filled a missing share
        return "-"
    return percent(value) if isinstance(value, float) else str(value)


def test_cells(row: dict[str, Any]) -> dict[str, str]:
    """A test row (`stats.Contrast.row`) as table cells: p to 3 digits, the difference and its interval in points."""
    cells = {k: str(v) for k, v in row.items()}
    cells["p (one-sided Fisher)"] = f"{row['p (one-sided Fisher)']:.3g}"
    cells["difference"] = f"{100 * row['difference']:+.0f} points"
    low, high = row.pop("95% CI low (Newcombe)"), row.pop("95% CI high (Newcombe)")
    cells.pop("95% CI low (Newcombe)"), cells.pop("95% CI high (Newcombe)")
    cells["95% interval (Newcombe)"] = f"[{100 * low:+.0f}, {100 * high:+.0f}] points"
    return cells


def phase2_markers(
    fig: go.Figure, axis: StepAxis, metrics: Sequence[dict[str, Any]], config: dict[str, Any]
) -> None:
    """Phase 2 marked on a study-A run's accuracy figure, by the rule every study-A figure uses."""
    if config.get("task", {}).get("name") != "mpsp":
        return
    from analyses.studies.study_a.evolution import add_phase2_markers  # loads torch

    add_phase2_markers(fig, axis, metrics, label_y=0.55)


def evolution_figure(run_dir: Path, cache: Path | None, progress: bool) -> go.Figure | None:
    """Study A's circuit-evolution figure of a study-A run (None for another study's run)."""
    from interp.store.run_folder import read_config

    if read_config(run_dir).get("task", {}).get("name") != "mpsp":
        return None
    from analyses.studies.study_a.evolution import circuit_evolution_figure  # loads torch

    return circuit_evolution_figure(run_dir, progress=progress, cache=cache)


SECTION = ReportSection(html=study_a_html, markers=phase2_markers, evolution=evolution_figure)
"""Study A's section of the report (`analyses.studies.REPORT_SECTIONS` names this module)."""

SECTION_WITHOUT_TESTS = ReportSection(
    html=partial(study_a_html, tests=False), markers=phase2_markers, evolution=evolution_figure
)
"""`SECTION` without contrast tests: `make demo`'s own runs (one seed a cell, nothing preregistered)."""


def _crossed_99(runs: list[RunState]) -> pd.DataFrame:
    """The crossed design's shares on the 99% rule (the robustness reading beside the 100% one)."""
    shares = crossed_shares(runs, "rule-99")
    return shares.assign(milestone="rule-99") if len(shares) else shares
