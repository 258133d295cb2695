"""Study B, protocol 3's pilots (`analyses.studies.study_b.diagnostics.cover`): coverage, the rule, a toy run."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analyses.studies.study_b.diagnostics.cover import (
    COVER_VARIANTS,
    cover_row,
    cover_table,
    covered_at,
    decide_cover,
)
from analyses.studies.study_b.diagnostics.pilots import PROTOCOL_2, variant_settings
from tests.builders import STUDY_B_TOY as TOY

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _record(step, flatness=0.0, ln_f=1.0, x=-3.0):
    return {"step": step, "flatness": flatness, "ln_f": ln_f, "x": [x], "cosine": [0.99], "walls": 0}


def test_coverage_is_the_first_record_with_every_x_bin_visited_or_a_halving():
    stuck = [_record(s) for s in range(0, 1000, 200)]
    assert covered_at(stuck, 1.0) == math.inf
    assert covered_at([*stuck, _record(1000, flatness=0.2), _record(1200, flatness=0.9)], 1.0) == 1000
    # A halving resets the histogram (flatness 0 again) but needs a flat one first.
    assert covered_at([*stuck, _record(1000, ln_f=0.5)], 1.0) == 1000
    # From ln f = 10, ln f = 1 is three halvings and more, not a start at 1.
    assert covered_at([_record(0, ln_f=10.0), _record(200, ln_f=10.0)], 10.0) == math.inf


def test_a_row_counts_halvings_and_x_bins_and_the_rule_takes_the_first_covering_variant():
    pilot = {
        "variant": "classic-10",
        "overrides": {"ln_f0": 10.0},
        "cpu_seconds": 4.0,
        "steps_timed": 100,
        "start_cvs": [-3.2, 9.9],
    }
    last = {**_record(400, flatness=0.5, ln_f=1.25, x=-3.0), "S": [[0.0] * 7] * 4}
    row = cover_row(pilot, [_record(0, ln_f=10.0), last])
    assert (row["x-bins"], row["halvings"], row["covered x at step"]) == (4, 3, 400)
    assert row["CPU ms / step"] == pytest.approx(40.0) and row["x - x0 at the end"] == pytest.approx(0.2)

    def rows(**covered):
        return pd.DataFrame(
            [{"variant": k.replace("_", "-"), "covered x at step": v} for k, v in covered.items()]
        )

    inf = math.inf
    assert decide_cover(rows(classic_1=inf, classic_10=5000.0, narrow_classic_1=200.0))[0] == "classic-10"
    assert decide_cover(rows(classic_1=9000.0, classic_10=200.0))[0] == "classic-1"
    none, why = decide_cover(rows(classic_1=inf, classic_10=inf, narrow_classic_1=inf))
    assert none is None and "ran: classic-1, classic-10, narrow-classic-1" in why


def test_the_variants_are_protocol_2_with_linear_edges_and_the_classic_schedule_over_x():
    for variant in COVER_VARIANTS:
        settings = variant_settings(variant, 20_000)
        assert (settings.edges, settings.ln_f_schedule, settings.flat_over) == ("linear", "classic", "x")
        assert (settings.dt, settings.gamma, settings.walkers) == (
            PROTOCOL_2.wlmd.dt,
            PROTOCOL_2.wlmd.gamma,
            1,
        )
        assert settings.report_every == 200 and settings.x_above == PROTOCOL_2.wlmd.x_above
    narrow = variant_settings(COVER_VARIANTS[2], 20_000)
    assert (narrow.bins, narrow.x_below) == ((2, 7), 0.25)  # the window's two x-bins, of the same width
    assert variant_settings(COVER_VARIANTS[0], 20_000).bins == PROTOCOL_2.wlmd.bins


def test_the_cover_pilots_run_at_toy_scale_and_rebuild_from_their_records(tmp_path):
    """The three variants at toy scale (p = 11, 20 steps): each walk runs the classic schedule
    over x on its grid, and the script prints the same table and a decision from the exported
    records.
    """
    from analyses.studies.study_b.diagnostics.pilots import export_pilots, run_pilots
    from analyses.studies.study_b.settings import settings_with

    settings = settings_with(TOY, PROTOCOL_2)
    frame = run_pilots(tmp_path / "run", 20, COVER_VARIANTS, settings, table=cover_table)
    assert list(frame["variant"]) == [v.name for v in COVER_VARIANTS]
    assert list(frame["x-bins"]) == [4, 4, 2] and (frame["steps run"] == 20).all()
    config = json.loads((tmp_path / "run" / "classic-10" / "entropy" / "config.json").read_text())["wlmd"]
    assert (config["grid"]["edges"], config["schedule"]["kind"], config["schedule"]["ln_f0"]) == (
        "linear",
        "flat",
        10.0,
    )
    assert config["schedule"]["flat_over"] == "x"
    export_pilots(tmp_path / "run", tmp_path / "records", COVER_VARIANTS)
    pd.testing.assert_frame_equal(cover_table(tmp_path / "records"), frame)
    script = ROOT / "scripts" / "long_runs" / "study_b_pilots.py"
    done = subprocess.run(
        [sys.executable, str(script), "--records", str(tmp_path / "records"), "--cover"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "narrow-classic-1" in done.stdout and "decision:" in done.stdout.splitlines()[-1]


def test_cover_and_production_check_together_exit_2_with_one_line(tmp_path):
    script = ROOT / "scripts" / "long_runs" / "study_b_pilots.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--cover", "--production-check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "give one" in done.stderr.strip().splitlines()[-1]
