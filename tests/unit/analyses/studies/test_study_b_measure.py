"""Study B's measurement driver (`analyses.studies.study_b.measure`) and its tables, at toy scale."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pandas as pd
import pytest
import torch

from analyses.studies.study_b import figures as study_b_figures
from analyses.studies.study_b import measure as study_b_measure
from analyses.studies.study_b import protocol as study_b
from analyses.studies.study_b import records as study_b_records
from analyses.studies.study_b import tables as study_b_tables
from analyses.studies.study_b.settings import Y_TOP, StudyBSettings, settings_with
from interp.cli import main
from interp.config import to_dict
from interp.errors import ConfigError
from interp.store.checkpoint import load_checkpoint
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
    pd.testing.assert_frame_equal(study_b_tables.table(out), frame)  # rebuilt from the folders, no training


def test_tables_from_the_run_folders(measured, capsys):
    out, frame = measured
    summary = study_b_tables.summary(frame)
    assert len(summary) == 6 and (summary["seeds"] == 1).all()
    wl = study_b_tables.wlmd_frame(out)
    assert wl.loc[0, "samples"] >= 1 and -1 <= wl.loc[0, "cosine_adamw_wlmd"] <= 1 + 1e-9
    x0, _ = study_b.source_cvs(seed_folder(out, 0) / "adamw")
    assert abs(wl.loc[0, "x_wlmd"] - x0) <= TINY.wlmd.window_x + 1e-6  # the sample is in the window
    ranks = study_b_tables.rank_table(out)
    assert {"adamw before", "adamw after", "wlmd before", "wlmd after"} <= set(ranks.columns)
    assert set(ranks["matrix"]) <= set(study_b_tables.RANK_MATRICES) and (ranks["wlmd before"] >= 1).all()
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
        "walk.html",
    ]


def test_a_folder_measured_with_other_settings_is_refused(measured):
    out, _ = measured
    with pytest.raises(ConfigError, match=r"measured with other settings \(epochs: \d+, now 31\)"):
        study_b_measure.measure(out, seeds=(0,), settings=settings_with({"epochs": 31}, TINY))
    nested = settings_with({"wlmd": {"dt": 2e-3}}, TINY)  # a nested setting is named by its path
    with pytest.raises(ConfigError, match=r"\(wlmd.dt: [0-9.e-]+, now 0.002\)"):
        study_b_measure.measure(out, seeds=(0,), settings=nested)


def test_the_cpu_protocol_region_holds_the_start_and_the_window():
    region = StudyBSettings().wlmd
    grid, window = region.grid(-4.0, 9.99), region.window(-4.0, 9.99)
    assert grid.contains(-4.0, 9.99) and window == (-4.25, -3.75, 9.9, Y_TOP)
    assert grid.x_range == (-4.75, -3.75) and grid.y_range[0] == 9.5
    # A start below y_low is still inside the grid: the lower edge moves under it.
    assert region.grid(-4.0, 9.2).contains(-4.0, 9.2)


def test_the_walk_schedule_is_the_ramp_or_the_classic_one_and_old_settings_are_unchanged():
    """Protocols 1 and 2 write the settings they always wrote (so their folders resume); the
    classic schedule starts at ln_f0 and counts the bins flat_over names.
    """
    from analyses.studies.study_b.settings import PRESETS

    protocol_2 = PRESETS["protocol-2"]

    assert not {"ln_f_schedule", "ln_f0", "flat_over"} & set(to_dict(protocol_2.wlmd))
    ramp = protocol_2.wlmd.schedule()
    assert (ramp.kind, ramp.ln_f_max, ramp.flat_over) == ("ramp", 0.01, "visited")
    classic = dataclasses.replace(protocol_2.wlmd, ln_f_schedule="classic", ln_f0=2.0, flat_over="x")
    assert to_dict(classic)["ln_f_schedule"] == "classic"
    schedule = classic.schedule()
    assert (schedule.kind, schedule.ln_f0, schedule.flat_over, schedule.flatness) == ("flat", 2.0, "x", 0.8)


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


# Issue 18's protocol knobs at toy scale: the norm dropped during injection, a target the cap
# cannot reach (so "did not reach" is recorded), and a walk with a cosine target it never meets
# (so it runs to its budget in recorded chunks).
TINY_2 = settings_with(
    {
        "injection_keep_norm": False,
        "injection_target_acc": 0.999,
        "wlmd": {"target_cosine": -1.0, "max_steps": 8, "report_every": 3},
    },
    TINY,
)


@pytest.fixture(scope="module")
def measured_2(tmp_path_factory):
    out, before = tmp_path_factory.mktemp("measure2"), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return out, study_b_measure.measure(out, seeds=(0,), settings=TINY_2)
    finally:
        torch.set_num_threads(before)


def test_protocol_fields_reach_the_injections_and_the_stop_is_recorded(measured_2):
    out, frame = measured_2
    runs = sorted(seed_folder(out, 0).glob("inject-*"))
    assert len(runs) == 6
    for run in runs:
        config = json.loads((run / "config.json").read_text())
        assert config["train"]["weight_norm"] is None  # the norm constraint was dropped ...
        assert config["train"]["target_acc"] == 0.999 and config["train"]["epochs"] == TINY.max_steps
        final = load_checkpoint(run).state_dict  # ... so the norm moved off the starting sphere
        norm = torch.linalg.vector_norm(
            torch.cat([t.flatten() for t in final.values() if t.is_floating_point()])
        )
        assert abs(norm.item() - config["injection"]["norm_extended"]) > 1e-4
    assert len(frame) == 6
    for _, row in frame.iterrows():  # a run stops at the target or at the cap, and says which
        assert bool(row["reached"]) or row["steps"] == TINY.max_steps


def test_the_walk_runs_in_recorded_chunks_to_its_budget(measured_2):
    out, _ = measured_2
    records = study_b.walk_records(seed_folder(out, 0) / "wlmd")
    assert [r["step"] for r in records] == [0, 3, 6, 8]  # the cosine target -1 is never met
    assert records[0]["cosine"] == [pytest.approx(1.0)] and records[0]["S_change"] is None
    assert all(0 <= r["flatness"] <= 1 and r["S_change"] is not None for r in records[1:])
    assert all(-1 <= c <= 1 + 1e-9 for r in records for c in r["cosine"])
    wl = study_b_tables.wlmd_frame(out)
    assert wl.loc[0, "walk_steps"] == 8 and wl.loc[0, "walk_cosine_max"] == max(records[-1]["cosine"])


def _walk(tmp_path, source, name, **fields):
    settings = dataclasses.replace(TINY.wlmd, **fields)
    return study_b.wlmd_sample(tmp_path / name, source, settings)


def test_a_reached_cosine_target_stops_after_the_minimum_steps(measured, tmp_path):
    out, _ = measured
    source = seed_folder(out, 0) / "adamw"
    _walk(tmp_path, source, "w", target_cosine=1.0, max_steps=50, report_every=2)
    assert [r["step"] for r in study_b.walk_records(tmp_path / "w")] == [0, 2, 4, 6]  # steps = 6, not 50


def test_a_fresh_wall_force_is_the_walks_and_refused_on_a_walk_that_kept_it(measured, tmp_path):
    """Protocol 6's setting reaches the sampler (its run folder records it) and a walk that ran
    under the kept force does not resume under the fresh one (the dynamics differ).
    """
    from interp.store.run_folder import read_config

    out, _ = measured
    source = seed_folder(out, 0) / "adamw"
    _walk(tmp_path, source, "fresh", wall_force="fresh", steps=4)
    assert read_config(tmp_path / "fresh" / "entropy")["wlmd"]["wall_force"] == "fresh"
    _walk(tmp_path, source, "kept", steps=4)
    assert "wall_force" not in read_config(tmp_path / "kept" / "entropy")["wlmd"]
    with pytest.raises(ConfigError, match="wall_force"):
        _walk(tmp_path, source, "kept", wall_force="fresh", steps=6)


def test_a_halving_target_extends_the_walk_to_its_budget_until_met(measured, tmp_path):
    """Protocol 3's second target: the cosine is met at once (1.0), but a tiny walk never checks
    flatness (every 1,000 steps), so one halving is never reached and the walk runs to its budget.
    """
    out, _ = measured
    source = seed_folder(out, 0) / "adamw"
    classic = {"ln_f_schedule": "classic", "ln_f0": 10.0, "flat_over": "x", "edges": "linear"}
    _walk(tmp_path, source, "w", target_cosine=1.0, target_halvings=1, max_steps=8, report_every=2, **classic)
    records = study_b.walk_records(tmp_path / "w")
    assert [r["step"] for r in records] == [0, 2, 4, 6, 8] and records[-1]["ln_f"] == 10.0
    # the table's walk columns hold the halvings of a classic walk only (the ramp's tables keep theirs)
    assert (
        study_b_tables.walk_summary(tmp_path / "w", dataclasses.replace(TINY.wlmd, **classic))[
            "walk_halvings"
        ]
        == 0
    )
    assert "walk_halvings" not in study_b_tables.walk_summary(tmp_path / "w", TINY.wlmd)


def test_the_walk_targets_count_halvings_of_the_classic_schedule():
    from analyses.studies.study_b.settings import PRESETS

    wlmd = PRESETS["protocol-3"].wlmd
    assert (wlmd.ln_f0, wlmd.target_halvings, wlmd.target_cosine) == (10.0, 4, 0.9)
    assert [wlmd.halvings(ln_f) for ln_f in (10.0, 5.0, 1.25, 0.625, 0.0)] == [0, 1, 3, 4, math.inf]
    assert wlmd.target_ln_f() == 0.625 and PRESETS["protocol-2"].wlmd.target_ln_f() is None
    assert wlmd.targets_met({"cosine": [0.85], "ln_f": 0.625})
    assert not wlmd.targets_met({"cosine": [0.85], "ln_f": 1.25})  # 3 halvings
    assert not wlmd.targets_met({"cosine": [0.95], "ln_f": 0.3125})  # the cosine
    assert not wlmd.targets_met({"cosine": [float("nan")], "ln_f": 0.3125})  # a diverged walker
    assert PRESETS["protocol-2"].wlmd.targets_met({"cosine": [0.85], "ln_f": 0.01})  # no halving target
    assert PRESETS["protocol-3"].wlmd.budget() == 150_000 and PRESETS["protocol-3"].target_flatness is None
    # Protocol 4 is protocol 3 with twice the budget, and nothing else (so it continues its walks).
    protocol_3, protocol_4 = to_dict(PRESETS["protocol-3"]), to_dict(PRESETS["protocol-4"])
    assert study_b_measure.settings_difference(protocol_3, protocol_4) == ("wlmd.max_steps", 150_000, 300_000)
    assert study_b_measure.settings_difference(protocol_4, protocol_4) is None
    # Protocol 5 is protocol 4 with ten times the production steps, and nothing else.
    protocol_5 = to_dict(PRESETS["protocol-5"])
    assert study_b_measure.settings_difference(protocol_4, protocol_5) == (
        "wlmd.production_steps",
        5_000,
        50_000,
    )
    assert study_b_measure.settings_difference(protocol_5, {**protocol_4, "wlmd": protocol_5["wlmd"]}) is None
    # Protocol 6 is protocol 5 with a fresh force on a reflected walker, and nothing else.
    protocol_6 = to_dict(PRESETS["protocol-6"])
    assert study_b_measure.settings_difference(protocol_5, protocol_6) == (
        "wlmd.wall_force",
        "kept",
        "fresh",
    )
    assert "wall_force" not in protocol_5["wlmd"]  # protocols 1-5 wrote no such field: they resume
    with pytest.raises(ConfigError, match="target_halvings .*ln_f_schedule"):
        settings_with({"wlmd": {"target_halvings": 2}})  # the ramp never halves
    settings = to_dict(PRESETS["protocol-3"])
    assert (
        study_b_tables.untested({"samples": 4, "sample_walker_cosine": 0.8, "walk_halvings": 4}, settings)
        is None
    )
    assert study_b_tables.untested(
        {"samples": 4, "sample_walker_cosine": 0.95, "walk_halvings": 2}, settings
    ) == ("cosine 0.950 > 0.9, ln f halved 2 times < 4")


def test_a_killed_walk_resumes_to_the_same_records(measured, tmp_path, monkeypatch):
    out, _ = measured
    source = seed_folder(out, 0) / "adamw"
    _walk(tmp_path, source, "a", report_every=2)
    straight = study_b.walk_records(tmp_path / "a")
    write = study_b.atomic_write_json

    def killed_at_step_4(path, records):  # the step-4 checkpoint is on disk, its record is not
        if records[-1]["step"] == 4:
            raise KeyboardInterrupt
        write(path, records)

    monkeypatch.setattr(study_b, "atomic_write_json", killed_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        _walk(tmp_path, source, "b", report_every=2)
    assert [r["step"] for r in study_b.walk_records(tmp_path / "b")] == [0, 2]
    monkeypatch.setattr(study_b, "atomic_write_json", write)
    _walk(tmp_path, source, "b", report_every=2)
    assert study_b.walk_records(tmp_path / "b") == straight


def test_export_keeps_no_weights_and_the_records_rebuild_the_tables(measured_2, tmp_path, capsys):
    out, frame = measured_2
    dest = study_b_records.export_results(out, tmp_path / "records")
    files = [p for p in dest.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix in (".safetensors", ".pt", ".bin")]
    assert sum(p.stat().st_size for p in files) < 2_000_000
    assert len(list(dest.glob("seed_0/inject-*/DONE"))) == 6 and (dest / "seed_0" / "walk.json").exists()
    for config in dest.glob("seed_0/inject-*/config.json"):  # no path of this machine in the records
        source = json.loads(config.read_text())["injection"]["source"]
        assert source.startswith("seed_0/") and (out / source).exists(), source
    with pytest.raises(SystemExit) as info:
        main(["study-b", "records", str(dest)])
    text = capsys.readouterr().out
    assert info.value.code == 0
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 3 * 2  # header, then per noise the seed and the mean
    for _, row in frame.iterrows():
        status = (
            f"reached at step {row['steps']}" if row["reached"] else f"not reached** (cap {TINY.max_steps})"
        )
        assert status in text


def test_the_records_alone_draw_the_walks_and_the_forgetting_curves(measured_2, tmp_path, capsys):
    out, _ = measured_2
    dest = study_b_records.export_results(out, tmp_path / "records")
    walk = json.loads((dest / "seed_0" / "walk.json").read_text())
    with pytest.raises(SystemExit) as info:
        main(["study-b", "records", str(dest), "--figures", str(tmp_path / "figures")])
    assert info.value.code == 0 and "figures: 4 HTML files" in capsys.readouterr().out
    for name in ("walks", *(f"seed_0/forgetting_{noise}" for noise in study_b_measure.NOISES)):
        assert (tmp_path / "figures" / f"{name}.html").stat().st_size > 1000, name
    figures = study_b_records.record_figures(dest)
    cosine, flatness, ln_f = figures["walks"].data
    assert list(cosine.x) == [r["step"] for r in walk] and list(cosine.y) == [r["cosine"][0] for r in walk]
    assert list(flatness.y) == [r["flatness"] for r in walk if r["flatness"] > 0]
    assert list(ln_f.y) == [r["ln_f"] for r in walk]
    target = json.loads((dest / "settings.json").read_text())["wlmd"]["target_cosine"]
    assert [s.y0 for s in figures["walks"].layout.shapes] == [target]  # TINY sets no flatness target
    # Each forgetting curve is the injection's own record, AdamW and WLMD side by side.
    metrics = [
        json.loads(line)
        for line in (dest / "seed_0" / "inject-wlmd-sum" / "metrics.jsonl").read_text().splitlines()
    ]
    traces = {t.name: t for t in figures["seed_0/forgetting_sum"].data}
    assert list(traces["WLMD: original test acc"].y) == [r["test/acc"] for r in metrics]
    assert set(traces) == {
        f"{m}: {what}" for m in ("AdamW", "WLMD") for what in ("original test acc", "noise acc")
    }


def test_the_walk_figure_names_each_walker_and_places_log_targets_in_log_units():
    def records(cosines, flatness):
        return [
            {"step": 5 * i, "cosine": c, "flatness": f, "visited": i, "ln_f": 0.01 / (i + 1)}
            for i, (c, f) in enumerate(zip(cosines, flatness))
        ]

    walks = {
        "seed 0": records([[1.0], [0.95], [0.9]], [0.0, 0.2, 0.5]),
        "seed 1": records([[1.0, 1.0], [0.97, 0.93]], [0.0, 0.1]),
    }
    fig = study_b_figures.walk_figure(walks, target_cosine=0.9, target_flatness=0.8, target_ln_f=0.625)
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert names == ["seed 0", "seed 1, walker 0", "seed 1, walker 1"]
    assert list(fig.data[5].y) == [0.1] and list(fig.data[5].customdata) == [1]  # flatness 0 is left out
    assert [s.y0 for s in fig.layout.shapes] == [0.9, 0.8, 0.625]
    # plotly places annotations on a log axis in log10 units: the flatness label sits at the line.
    labels = {a.text: a.y for a in fig.layout.annotations if a.text.startswith("target")}
    assert labels == {
        "target 0.9": 0.9,
        "target 0.8": pytest.approx(math.log10(0.8)),
        "target 0.625": pytest.approx(math.log10(0.625)),
    }
    assert not [a for a in fig.layout.annotations if a.text.startswith("flatness 0")]
    # A walk that has not covered its bins yet (protocol 3's count) says why its panel is empty.
    empty = study_b_figures.walk_figure({"seed 0": records([[1.0], [0.95]], [0.0, 0.0])})
    assert [a.text for a in empty.layout.annotations if a.text.startswith("flatness 0")] == [
        "flatness 0 at every record: a bin it counts has not been visited yet"
    ]
    # protocol 3's halvings target is drawn where its ln f lies: ln f0 / 2 ** halvings
    from analyses.studies.study_b.settings import PRESETS

    assert study_b_records._targets(to_dict(PRESETS["protocol-3"])) == (0.9, None, 0.625)
    assert study_b_records._targets(to_dict(PRESETS["protocol-2"])) == (0.9, 0.8, None)


@pytest.mark.parametrize(
    "settings, message",
    [
        ('{"injection_keep_norm": "yes"}', "injection_keep_norm"),
        ('{"injection_target_acc": 1.5}', "injection_target_acc"),
        ('{"wlmd": {"target_cosine": 2}}', "target_cosine"),
        ('{"wlmd": {"max_steps": 10}}', "max_steps"),  # below the 2,000 entropy steps of the preset
        ('{"wlmd": {"ln_f_schedule": "flat"}}', "valid: classic, ramp"),
        ('{"wlmd": {"flat_over": "all"}}', "flat_over"),
        ('{"wlmd": {"ln_f0": 0}}', "ln_f0"),
    ],
)
def test_bad_protocol_settings_exit_2_with_one_line(tmp_path, capsys, settings, message):
    with pytest.raises(SystemExit) as info:
        main(["study-b", "measure", str(tmp_path / "out"), "--settings", settings])
    err = capsys.readouterr().err
    assert info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_table_only_on_a_folder_without_the_seeds_exits_2_with_one_line(measured, tmp_path, capsys):
    out, _ = measured
    for folder, seeds, found in ((tmp_path / "none", "0", "none"), (out, "3-4", "0")):
        with pytest.raises(SystemExit) as info:
            main(["study-b", "measure", str(folder), "--seeds", seeds, "--table-only"])
        err = capsys.readouterr().err
        assert info.value.code == 2 and len(err.strip().splitlines()) == 1
        assert f"seed folders there: {found}" in err


def test_records_of_a_folder_without_tables_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["study-b", "records", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "study_b_runs.csv" in err and len(err.strip().splitlines()) == 1


def test_a_seed_still_walking_is_named_and_left_out_of_the_records(measured_2, tmp_path, capsys):
    """Exporting a seed before its injections finish would commit a row-less seed: it is left
    out with a note saying where it stands, and an export of only such seeds is refused in one
    line, writing nothing.
    """
    out, _ = measured_2
    folder = tmp_path / "measure"
    shutil.copytree(out, folder)
    walking = folder / "seed_3"
    shutil.copytree(folder / "seed_0", walking)
    for run in [*walking.glob("inject-*"), walking / "wlmd" / "samples"]:
        shutil.rmtree(run)
    step = study_b.walk_records(walking / "wlmd")[-1]["step"]
    assert study_b_measure.unfinished(folder) == {3: f"walking, step {step:,}"}

    def export(seeds: str, dest: str) -> int:
        with pytest.raises(SystemExit) as info:
            main(["study-b", "measure", str(folder), "--seeds", seeds, "--table-only", "--export", dest])
        return info.value.code

    assert export("0,3", str(tmp_path / "r")) == 0
    note = f"seed 3 is not measured yet (walking, step {step:,}): no retention row; left out"
    assert note in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "r").glob("seed_*")) == ["seed_0"]
    assert set(pd.read_csv(tmp_path / "r" / "study_b_wlmd.csv")["seed"]) == {0}

    assert export("3", str(tmp_path / "none")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: nothing to export")
    assert f"seed 3: walking, step {step:,}" in err[0] and not (tmp_path / "none").exists()


@pytest.mark.parametrize("written", ["", "seed,model,noise\n"])
def test_records_without_a_finished_run_exit_2(tmp_path, capsys, written):
    (tmp_path / "study_b_runs.csv").write_text(written)  # what an export of a seed still walking once wrote
    with pytest.raises(SystemExit) as info:
        main(["study-b", "records", str(tmp_path)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "no finished injection run" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="no finished injection run"):  # the API refuses it too
        study_b_tables.markdown_tables(tmp_path)


def test_a_walk_tests_the_claim_only_when_it_reached_both_targets():
    settings = {"wlmd": {"target_cosine": 0.9}, "target_flatness": 0.8}
    reached = {"samples": 4, "sample_walker_cosine": 0.88, "walk_flatness": 0.85}
    assert study_b_tables.untested(reached, settings) is None
    assert (
        study_b_tables.untested({"samples": 4, "sample_walker_cosine": 0.95, "walk_flatness": 0.85}, settings)
        == "cosine 0.950 > 0.9"
    )
    assert study_b_tables.untested(
        {"samples": 4, "sample_walker_cosine": 0.95, "walk_flatness": 0.1}, settings
    ) == ("cosine 0.950 > 0.9, flatness 0.1 < 0.8")
    # no sample to inject comes first, and the walk's own shortfalls still show
    halving = {"wlmd": {"target_cosine": 0.9, "target_halvings": 4}}
    assert study_b_tables.untested({"samples": 0, "walk_halvings": 3, "walk_cosine_max": 0.3}, halving) == (
        "no production sample in the window, ln f halved 3 times < 4"
    )
    assert (
        study_b_tables.untested({"samples": 4, "walk_halvings": 4, "sample_walker_cosine": 0.6}, halving)
        is None
    )
    # protocol 1's settings set no target: its rows say so instead of counting as tested
    assert study_b_tables.untested({"walk_cosine_max": 0.997, "walk_flatness": 0.1}, {"wlmd": {}}) == (
        "no targets set"
    )
    # strict: a value a set target needs and the row lacks (absent or NaN) is not met
    assert study_b_tables.untested({"samples": 4, "walk_halvings": float("nan")}, halving) == (
        "no cosine to the start recorded (target 0.9), no ln f halvings recorded (target 4)"
    )
    assert study_b_tables.untested({"sample_walker_cosine": 0.5, "walk_flatness": 0.9}, settings) == (
        "no sample count recorded"
    )
    # without a sample there is no sample's cosine to miss: the missing sample is the reason
    no_sample = {
        "samples": 0,
        "sample_walker_cosine": float("nan"),
        "walk_cosine_max": 0.95,
        "walk_halvings": 4,
    }
    assert study_b_tables.untested(no_sample, halving) == "no production sample in the window"


def test_a_walk_whose_production_finds_no_sample_is_a_row_that_does_not_test_the_claim(tmp_path, capsys):
    """Protocol 4's seed 0 met both walk targets, then spent its production steps outside the
    window: only its AdamW model is injected. Its records keep the walk, and its row says why
    it does not test the claim instead of showing a bare gap.
    """
    # A window of width ~0 around x0 that no snapshot can land in.
    settings = settings_with({"wlmd": {"window_x": 1e-12}}, TINY_2)  # TINY_2 records its walk
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.warns(UserWarning, match="seed 0: no WLMD sample in the window"):
            frame = study_b_measure.measure(tmp_path / "out", seeds=(0,), settings=settings)
    finally:
        torch.set_num_threads(before)
    assert set(frame["model"]) == {"adamw"}
    row = study_b_tables.wlmd_frame(tmp_path / "out").iloc[0]
    walk = study_b.walk_records(seed_folder(tmp_path / "out", 0) / "wlmd")
    x0, y0 = study_b.source_cvs(seed_folder(tmp_path / "out", 0) / "adamw")
    assert row["samples"] == 0 and row["walk_steps"] == walk[-1]["step"] > 0
    assert (row["x_adamw"], row["y_adamw"]) == (x0, y0) and pd.isna(row["x_wlmd"])
    measured = json.loads(json.dumps(to_dict(settings)))
    assert study_b_tables.untested(row, measured) == "no production sample in the window"

    dest = study_b_records.export_results(tmp_path / "out", tmp_path / "records")
    text = study_b_tables.markdown_tables(dest)
    for noise in study_b_measure.NOISES:
        (line,) = [r for r in text.splitlines() if r.startswith(f"| {noise} | 0 |")]
        assert line.split(" | ")[3] == "-"  # no WLMD accuracy
        assert "| **claim not tested** (no production sample in the window) |" in line
    # The same table's columns, whichever seed comes first.
    wlmd = pd.read_csv(dest / "study_b_wlmd.csv")
    assert list(wlmd.columns[:4]) == ["seed", "samples", "x_adamw", "y_adamw"]
    assert list(wlmd.columns[4:10]) == list(study_b_tables._SAMPLE_COLUMNS)


def test_the_median_walker_or_every_walker_decides_the_cosine_and_starts_are_own_seeds():
    from analyses.studies.study_b.settings import PRESETS

    walkers = PRESETS["protocol-2-walkers"]
    assert walkers.wlmd.walk_cosine([0.99, 0.87, 0.88]) == 0.88
    assert PRESETS["protocol-2"].wlmd.walk_cosine([0.99, 0.87, 0.88]) == 0.99
    assert walkers.start_seeds(2) == [2, 1002, 2002] and PRESETS["protocol-2"].start_seeds(2) == [2]
    with pytest.raises(ConfigError, match="target_walker"):
        settings_with({"wlmd": {"target_walker": "mean"}})
    assert math.isnan(walkers.wlmd.walk_cosine([0.5, float("nan"), 0.5]))  # a diverged walker: not far
    # A folder measured before the fields existed names the default it ran with, not None.
    old = to_dict(PRESETS["protocol-2"])
    assert "walker_starts" not in old
    assert study_b_measure.settings_difference(old, to_dict(walkers))[0] == "wlmd.steps"  # 10^5, now 10^4
    assert study_b_measure.settings_difference(
        {**old, "wlmd": to_dict(walkers)["wlmd"]}, to_dict(walkers)
    ) == (
        "walker_starts",
        "source",
        "own",
    )


def test_the_seeds_named_are_the_ones_tabulated_and_exported(measured_2, tmp_path):
    """A seed still training beside the finished one (a folder with only its AdamW run started)
    stays out of the tables and records when the seeds are named, and is in them otherwise.
    """
    out, _ = measured_2
    training = out / "seed_7"
    (training / "adamw").mkdir(parents=True)
    try:
        named = study_b_tables.wlmd_frame(out, seeds=[0])
        every = study_b_tables.wlmd_frame(out)
        dest = study_b_records.export_results(out, tmp_path / "records", seeds=[0])
    finally:
        shutil.rmtree(training)
    assert list(named["seed"]) == [0] and list(every["seed"]) == [0, 7]
    assert sorted(p.name for p in dest.glob("seed_*")) == ["seed_0"]
    assert set(pd.read_csv(dest / "study_b_wlmd.csv")["seed"]) == {0}


def test_an_export_adds_its_seeds_to_the_records_already_there(measured_2, tmp_path):
    """Seed 1 measured elsewhere (a copy of the folder, its seed renamed) joins seed 0's records
    without re-measuring seed 0: seed 0's rows stay as first exported, the summary and the mean
    ranks count both, exporting seed 1 again replaces its rows, other settings are refused.
    """
    out, _ = measured_2
    dest = study_b_records.export_results(out, tmp_path / "records", seeds=[0])
    first = pd.read_csv(dest / "study_b_runs.csv")
    other = tmp_path / "other"
    shutil.copytree(out, other)
    shutil.rmtree(other / "seed_0" / "inject-adamw-sum")  # so that seed 1's rows differ from seed 0's
    (other / "seed_0").rename(other / "seed_1")
    study_b_records.export_results(other, dest, seeds=[1])
    runs = pd.read_csv(dest / "study_b_runs.csv")
    assert list(runs["seed"]) == [0] * len(first) + [1] * (len(first) - 1)
    pd.testing.assert_frame_equal(runs[runs["seed"] == 0], first)
    assert set(pd.read_csv(dest / "study_b_wlmd.csv")["seed"]) == {0, 1}
    summary = pd.read_csv(dest / "study_b_summary.csv").set_index(["noise", "model"])
    assert summary.loc[("random", "adamw"), "seeds"] == 2 and summary.loc[("sum", "adamw"), "seeds"] == 1
    ranks = pd.read_csv(dest / "study_b_ranks_random.csv")
    seed_0 = pd.read_csv(dest / "seed_0" / study_b_records.SEED_RANKS)
    assert (ranks["seeds"] == 2).all() and ranks["adamw after"].tolist() == pytest.approx(
        seed_0["adamw after"].tolist()
    )  # the same runs under two names: the mean of equal ranks
    study_b_records.export_results(other, dest, seeds=[1])
    pd.testing.assert_frame_equal(pd.read_csv(dest / "study_b_runs.csv"), runs)
    settings = json.loads((other / "settings.json").read_text())
    (other / "settings.json").write_text(json.dumps({**settings, "k": settings["k"] + 1}))
    with pytest.raises(ConfigError, match="other settings"):
        study_b_records.export_results(other, dest, seeds=[1])


def test_paired_differences_are_seed_by_seed_with_t_intervals_and_tested_seeds_apart():
    from scipy import stats

    acc = {  # seed -> (AdamW, WLMD) test accuracy after random noise
        0: (0.70, 0.90),
        1: (0.75, 0.80),
        2: (0.60, 0.95),
    }
    runs = pd.DataFrame(
        [
            {"seed": s, "model": m, "noise": "random", "test_acc_after": a}
            for s, pair in acc.items()
            for m, a in zip(study_b_measure.MODELS, pair)
        ]
        + [{"seed": 0, "model": "adamw", "noise": "sum", "test_acc_after": 0.5}]  # no WLMD pair
    )
    settings = {"wlmd": {"target_cosine": 0.9}, "target_flatness": 0.8}
    wlmd = pd.DataFrame(
        [  # seed 1's walk stayed too close to its start: it does not test the claim
            {"seed": s, "samples": 4, "sample_walker_cosine": c, "walk_flatness": 0.9}
            for s, c in ((0, 0.5), (1, 0.95), (2, 0.4))
        ]
    )
    frame = study_b_tables.paired_differences(runs, wlmd, settings).set_index("noise")
    diffs = [w - a for a, w in acc.values()]
    low, high = stats.t.interval(0.95, 2, loc=sum(diffs) / 3, scale=stats.sem(diffs))
    random = frame.loc["random"]
    assert random["seeds"] == 3 and random["mean"] == pytest.approx(sum(diffs) / 3)
    assert (random["low"], random["high"]) == pytest.approx((low, high))
    tested = [diffs[0], diffs[2]]
    low, high = stats.t.interval(0.95, 1, loc=sum(tested) / 2, scale=stats.sem(tested))
    assert random["tested"] == 2 and (random["tested_low"], random["tested_high"]) == pytest.approx(
        (low, high)
    )
    assert frame.loc["sum", "seeds"] == 0 and math.isnan(frame.loc["sum", "mean"])
    assert study_b_tables.paired_differences(runs, None, settings).loc[0, "tested"] == 0
    text = study_b_tables._difference_markdown(frame.reset_index())
    assert f"| random | 3 | +0.2000 [{frame.loc['random', 'low']:+.4f}, " in text
    assert "| sum | 0 | - | 0 | - |" in text


def test_the_wlmd_table_prints_counts_as_counts_and_a_small_flatness_in_digits():
    cell = study_b_tables._wlmd_cell
    assert [cell("walls", 229484.0), cell("seed", 0.0), cell("walk_steps", 7)] == ["229484", "0", 7]
    assert [cell("walk_flatness", 3.3e-5), cell("walk_flatness", 0.0), cell("walk_cosine_max", 0.9089)] == [
        "3.3e-05",
        0.0,
        0.9089,
    ]
    assert cell("y_adamw", 10.0) == 10.0  # a measured value keeps the table's four decimals
    assert math.isnan(cell("walls", float("nan"))) and cell("walk_halvings", math.inf) == math.inf
