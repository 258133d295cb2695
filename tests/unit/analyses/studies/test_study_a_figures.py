"""Study A's answer figure (`analyses.studies.study_a.figures`) drawn from the committed records:
each point is a count of DONE summaries, each grid still training says so, an absent grid is left out.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd

from analyses.studies.study_a.decision import RESULTS
from analyses.studies.study_a.figures import GRIDS, rule_rate_figure, rule_rates


def _counted(grid: str, preset: str, r: float) -> tuple[int, int]:
    """(reached the rule, finished) counted from the grid's DONE files, independently of the report."""
    done = [json.loads(p.read_text()) for p in (RESULTS / grid / preset / f"r={r}").glob("seed_*/DONE")]
    return sum(d["milestones"]["rule"]["step"] is not None for d in done), len(done)


def test_every_point_is_its_cells_count_of_finished_runs_with_a_wilson_interval():
    table = rule_rates()
    assert set(table["grid"]) == {g for g in GRIDS if (RESULTS / g / "sweep.json").is_file()}
    for row in table.itertuples():
        assert (row.reached, row.finished) == _counted(row.grid, row.preset, row.r)
        if row.finished:
            assert row.ci_low <= row.rate <= row.ci_high
        else:  # a cell none of whose runs has finished yet has no rate, not a rate of 0
            assert pd.isna(row.rate) and pd.isna(row.ci_low) and pd.isna(row.ci_high)
    assert set(table.query("grid == 'wd-headline'")["weight_decay"]) == {0.4}
    assert set(table.query("grid == 'headline'")["weight_decay"]) == {0.1}


def test_the_figure_has_a_line_per_grid_and_model_and_says_which_grids_are_still_training():
    fig = rule_rate_figure()
    table = rule_rates()
    names = [t.name for t in fig.data]
    drawn = table[table["finished"] > 0]  # a line needs a cell with a finished run
    assert len(names) == len(drawn.groupby(["grid", "preset"]))
    for grid, rows in table.groupby("grid"):
        first = rows.iloc[0]
        training = first["grid_finished"] < first["runs"]
        mentioned = [n for n in names if f"({GRIDS[grid]}" in n]
        assert mentioned and all(
            (f"{first['grid_finished']} of {first['runs']} runs finished" in n) == training for n in mentioned
        )
    # Lines of one colour (same model and weight decay, other grids) differ by their marker.
    styles = [(t.line.color, t.line.dash, t.marker.symbol) for t in fig.data]
    assert len(set(styles)) == len(styles), styles


def test_a_grid_not_committed_yet_is_left_out(tmp_path):
    shutil.copytree(RESULTS / "headline", tmp_path / "headline")
    assert set(rule_rates(tmp_path)["grid"]) == {"headline"}
    assert len(rule_rate_figure(tmp_path).data) == 2  # two layers and one layer
    assert len(rule_rate_figure(tmp_path / "nothing").data) == 0
