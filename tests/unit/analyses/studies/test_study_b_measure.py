"""Study B's measurement driver (`analyses.studies.study_b_measure`) and its tables, at toy scale."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from analyses.studies import study_b, study_b_measure
from analyses.studies.study_b_settings import Y_TOP, StudyBSettings, settings_with
from interp.cli import main
from interp.errors import ConfigError
from interp.sweep.specs import seed_folder

TINY = settings_with(
    {
        "p": 7,
        "weight_norm": 6.0,
        "epochs": 30,
        "lr": 3e-2,
        "model_overrides": {"d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16},
        "wlmd": {
            "steps": 6,
            "production_steps": 4,
            "dt": 1e-3,
            "every": 1,
            "max_samples": 2,
            "y_low": 0.0,
            "window_y": 0.0,
        },
        "k": 3,
        "max_steps": 3,
        "eval_every": 1,
    }
)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out, before = tmp_path_factory.mktemp("measure"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return out, study_b_measure.measure(out, seeds=(0,), settings=TINY)
    finally:
        torch.set_num_threads(before)


def test_measure_runs_both_models_on_every_noise(measured):
    out, frame = measured
    assert sorted(zip(frame["model"], frame["noise"])) == sorted(
        (m, n) for m in study_b_measure.MODELS for n in study_b_measure.NOISES
    )
    assert (frame["steps"] <= TINY.max_steps).all() and frame["retention"].between(0, 1e9).all()
    assert frame["cosine_before_after"].between(-1, 1 + 1e-9).all()
    wlmd_source = frame.loc[frame["model"] == "wlmd", "source"].iloc[0]
    assert "wlmd/samples/checkpoints" in wlmd_source  # the WLMD rows really start from a sample
    pd.testing.assert_frame_equal(study_b_measure.table(out), frame)  # rebuilt from the folders, no training


def test_tables_from_the_run_folders(measured, capsys):
    out, frame = measured
    summary = study_b_measure.summary(frame)
    assert len(summary) == 6 and (summary["seeds"] == 1).all()
    wl = study_b_measure.wlmd_frame(out)
    assert wl.loc[0, "samples"] >= 1 and -1 <= wl.loc[0, "cosine_adamw_wlmd"] <= 1 + 1e-9
    x0, _ = study_b.source_cvs(seed_folder(out, 0) / "adamw")
    assert abs(wl.loc[0, "x_wlmd"] - x0) <= TINY.wlmd.window_x + 1e-6  # the sample is in the window
    ranks = study_b_measure.rank_table(out)
    assert {"adamw before", "adamw after", "wlmd before", "wlmd after"} <= set(ranks.columns)
    assert set(ranks["matrix"]) <= set(study_b_measure.RANK_MATRICES) and (ranks["wlmd before"] >= 1).all()
    with pytest.raises(SystemExit) as info:
        main(["study-b", "measure", str(out), "--seeds", "0", "--table-only"])
    assert info.value.code == 0
    assert "## summary" in capsys.readouterr().out and (out / "study_b_runs.csv").exists()
    figures = sorted(p.name for p in (seed_folder(out, 0)).glob("*.html"))
    assert figures == [
        "forgetting_random.html",
        "forgetting_square.html",
        "forgetting_sum.html",
        "ranks_random.html",
    ]


def test_a_folder_measured_with_other_settings_is_refused(measured):
    out, _ = measured
    with pytest.raises(ConfigError, match="measured with other settings"):
        study_b_measure.measure(out, seeds=(0,), settings=settings_with({"epochs": 31}, TINY))


def test_the_cpu_protocol_region_holds_the_start_and_the_window():
    region = StudyBSettings().wlmd
    grid, window = region.grid(-4.0, 9.99), region.window(-4.0, 9.99)
    assert grid.contains(-4.0, 9.99) and window == (-4.25, -3.75, 9.9, Y_TOP)
    assert grid.x_range == (-4.75, -3.75) and grid.y_range[0] == 9.5
    # A start below y_low is still inside the grid: the lower edge moves under it.
    assert region.grid(-4.0, 9.2).contains(-4.0, 9.2)


@pytest.mark.parametrize(
    "settings, message",
    [
        ('{"wlmd": {"dtt": 1e-4}}', "unknown key 'dtt'"),
        ('{"epochz": 3}', "unknown key 'epochz'"),
        ("dt=1e-4", "is not JSON"),
        ("[1]", "not a JSON object"),
    ],
)
def test_bad_settings_exit_2_with_one_line(tmp_path, capsys, settings, message):
    with pytest.raises(SystemExit) as info:
        main(["study-b", "measure", str(tmp_path / "out"), "--settings", settings])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()  # nothing started
