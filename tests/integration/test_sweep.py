"""Sweeps, evolution and reports on tiny runs (issue: circuit evolution, sweeps and reports)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import analyses.studies.study_a.evolution as circuit_evolution
from analyses import get_analysis, load_subject
from analyses.evolution import evolve
from analyses.report.page import accuracy_figure
from analyses.report.records import load_results, rate_table, wilson
from interp.cli import main
from interp.errors import ConfigError
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.run_folder import is_done, read_done
from interp.sweep.specs import read_sweep
from tasks import MPSPTask

GRID = {
    "presets": ["mpsp-1l1h", "mpsp-2l1h"],
    "task": {"vocab": 12, "n": 4, "n_train": 128, "n_val": 32, "n_adv": 32},
    "train": {"epochs": 12, "eval_every": 4, "checkpoint_log_points": 4},
    "axes": {"r": [0.5, 0.9]},
    "seeds": 2,
}


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "grid.json").write_text(json.dumps(GRID))
    with pytest.raises(SystemExit) as info:
        main(
            [
                "sweep",
                "--grid",
                str(folder / "grid.json"),
                "--out",
                str(folder / "out"),
                "--jobs",
                "1",
                "--no-progress",
            ]
        )
    assert info.value.code == 0
    return folder / "out"


def test_sweep_trains_every_grid_point_with_derived_seeds(sweep_dir):
    specs, meta = read_sweep(sweep_dir)
    assert len(specs) == 8 and all(is_done(s.out) for s in specs)
    assert meta["grid"]["axes"] == {"r": [0.5, 0.9]}
    by_point = {(s.tags["preset"], s.tags["r"], s.tags["seed"]): s for s in specs}
    # Same model and seed index -> same init at every r; another seed index -> another init.
    assert by_point["mpsp-1l1h", 0.5, 0].train["seed"] == by_point["mpsp-1l1h", 0.9, 0].train["seed"]
    assert by_point["mpsp-1l1h", 0.5, 0].train["seed"] != by_point["mpsp-1l1h", 0.5, 1].train["seed"]
    assert (
        by_point["mpsp-1l1h", 0.5, 1].train["data_seed"] == by_point["mpsp-2l1h", 0.9, 1].train["data_seed"]
    )


def test_report_table_matches_the_runs_summaries(sweep_dir, capsys):
    code, out, _ = _cli(capsys, "report", sweep_dir, "--no-progress")
    assert code == 0 and (sweep_dir / "report.html").exists()
    specs, _ = read_sweep(sweep_dir)
    table = rate_table(load_results(sweep_dir)[1])
    assert len(table) == 4 * len(MPSPTask.milestones)  # 2 presets x 2 ratios x each milestone
    for row in table.itertuples():
        runs = [s for s in specs if s.tags["preset"] == row.preset and s.tags["r"] == row.r]
        steps = [read_done(s.out)["milestones"][row.milestone]["step"] for s in runs]
        reached = sum(step is not None for step in steps)
        assert (row.runs, row.reached, row.rate) == (2, reached, reached / 2)
        assert (row.ci_low, row.ci_high) == pytest.approx(wilson(reached, 2))
    html = (sweep_dir / "report.html").read_text()
    assert "Wilson" in html and html.count("<details data-figure=") == 8 and "NaN" not in html


def test_wilson_interval_known_values():
    low, high = wilson(7, 10)
    assert (low, high) == pytest.approx((0.3968, 0.8922), abs=1e-4)  # textbook Wilson 95% for 7/10
    assert wilson(0, 10)[0] == 0.0


def test_evolution_equals_the_single_checkpoint_analysis_and_is_cached(sweep_dir):
    run = read_sweep(sweep_dir)[0][0].out
    analysis = get_analysis("fingerprint")
    params = analysis.params(split="adv")
    evolution = evolve(run, analysis, params, progress=False)
    assert evolution.steps == list_checkpoints(run)
    for step, result in zip(evolution.steps, evolution.results):
        direct = analysis.compute(load_subject(checkpoint_dir(run, step)), params)
        for name in ("qk_rho_weights", "qk_rho_empirical", "attn_pos0", "ov_parity_rho"):
            torch.testing.assert_close(getattr(result, name), getattr(direct, name), equal_nan=True)
    calls = []
    counting = dataclasses.replace(analysis, compute=lambda *a: calls.append(a))
    evolve(run, counting, params, progress=False)
    assert calls == []  # everything came from the cache
    assert set(evolution.to_frame()["step"]) == set(evolution.steps)


def test_evolution_in_worker_processes_equals_the_series_computed_here(sweep_dir, tmp_path):
    """Two worker processes give the results the series computed in this process gives, into
    the cache, from which a second call reads them; a bad number of workers is refused.
    """
    run = read_sweep(sweep_dir)[0][0].out
    analysis = get_analysis("fingerprint")
    params = analysis.params(split="adv")
    here = evolve(run, analysis, params, progress=False, cache=tmp_path / "here")
    first = here.steps[:2]  # cached before the workers run: they compute only the others
    evolve(run, analysis, params, progress=False, cache=tmp_path / "workers", checkpoints=first)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "workers").rglob("*") if p.is_file()}
    workers = evolve(run, analysis, params, progress=False, cache=tmp_path / "workers", jobs=2)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # the cached ones untouched
    assert workers.steps == here.steps and len(list((tmp_path / "workers" / "fingerprint").iterdir())) == len(
        here.steps
    )
    for ours, theirs in zip(here.results, workers.results):
        for name in ("qk_rho_weights", "qk_rho_empirical", "attn_pos0", "ov_parity_rho"):
            torch.testing.assert_close(getattr(theirs, name), getattr(ours, name), equal_nan=True)
    calls = []
    counting = dataclasses.replace(analysis, compute=lambda *a: calls.append(a))
    again = evolve(run, counting, params, progress=False, cache=tmp_path / "workers", jobs=2)
    assert calls == [] and len(again.results) == len(here.results)  # from the cache
    for bad in (0, -1, True):
        with pytest.raises(ConfigError, match="worker processes"):
            evolve(run, analysis, params, progress=False, jobs=bad)


def test_changed_params_recompute_instead_of_returning_stale_results(sweep_dir):
    run = read_sweep(sweep_dir)[0][0].out
    analysis = get_analysis("fingerprint")
    on_adv = evolve(run, analysis, analysis.params(split="adv"), progress=False)
    on_val = evolve(run, analysis, analysis.params(split="val"), progress=False)
    assert all(r.split == "val" for r in on_val.results) and all(r.split == "adv" for r in on_adv.results)


def test_circuit_evolution_figure_and_explorer(sweep_dir):
    run = read_sweep(sweep_dir)[0][0].out
    fig = circuit_evolution.circuit_evolution_figure(run)
    names = {trace.name for trace in fig.data}
    assert {"train", "val", "adv", "cosine", "ratio / (r/(1-r))", "L0H0"} <= names
    # A head is one legend entry (and one colour) across its three panels.
    heads = [t for t in fig.data if t.name == "L0H0"]
    assert len(heads) == 3 and sum(bool(t.showlegend) for t in heads) == 1
    assert len({t.line.color for t in heads}) == 1
    # Every panel shares one log step axis; step 0 is drawn (at half the first positive step).
    assert {fig.layout[name].type for name in fig.layout if name.startswith("xaxis")} == {"log"}
    assert all(min(t.x) > 0 for t in fig.data) and 0 in fig.data[0].customdata
    explorer = circuit_evolution.attention_explorer(run)
    assert len(explorer.frames) == len(list_checkpoints(run))
    assert explorer.layout.sliders[0].steps[0].label == "0"
    # Only some checkpoints: the head panels and the slider have those, the accuracy panel every evaluation.
    chosen = list_checkpoints(run)[1::2]
    thin = circuit_evolution.circuit_evolution_figure(run, checkpoints=chosen)
    assert sorted({x for t in thin.data if t.name == "L0H0" for x in t.customdata}) == chosen
    assert list(thin.data[0].customdata) == list(fig.data[0].customdata)
    explorer = circuit_evolution.attention_explorer(run, checkpoints=chosen)
    assert [int(f.name) for f in explorer.frames] == chosen


def test_study_a_evolution_writes_the_figure_and_explorer_and_evolve_needs_an_analysis(
    sweep_dir, capsys, tmp_path
):
    run = read_sweep(sweep_dir)[0][0].out
    code, out, err = _cli(
        capsys, "study-a", "evolution", "--run", run, "--out", tmp_path / "a", "--no-progress"
    )
    assert code == 0 and err == "", err
    new = {p.name: p.stat().st_size for p in (tmp_path / "a").glob("*.html")}
    assert sorted(new) == ["circuit_evolution.html", "explorer.html"] and min(new.values()) > 1000
    # `interp evolve` without --analysis ran study A's figure for a release; now it names the analyses.
    code, out, err = _cli(capsys, "evolve", "--run", run, "--out", tmp_path / "b", "--no-progress")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "needs --analysis NAME" in err and "fingerprint, fourier, grads" in err
    assert "interp study-a evolution --run RUN" in err and not (tmp_path / "b").exists()
    code, _, err = _cli(capsys, "evolve", "--run", run, "--param", "split=adv")
    assert code == 2 and "--analysis" in err


def test_the_phase2_lines_and_labels_sit_at_the_onset_and_end_on_the_log_axis(sweep_dir, tmp_path):
    import math
    import shutil

    run = tmp_path / "run"
    shutil.copytree(read_sweep(sweep_dir)[0][0].out, run)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    # Phase 1 (val right, adv wrong), then a rise over the last two evaluations.
    for record, adv in zip(records, [0.0] * (len(records) - 2) + [0.6, 1.0]):
        record |= {"val/acc": 1.0, "adv/acc": adv}
    onset, end = records[-3]["step"], records[-1]["step"]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    fig = circuit_evolution.circuit_evolution_figure(run)
    # Shapes take data units on a log axis, annotations log10 units (plotly's conventions):
    # an annotation at x = onset would stretch the axis to 10^onset.
    lines = [s for s in fig.layout.shapes if s.x0 == s.x1 and s.yref.endswith("domain")]
    assert len(lines) == 12 and sorted({s.x0 for s in lines}) == [onset, end]
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("phase 2 onset")]
    assert label.x == pytest.approx(math.log10(onset)) and label.xref == "x"
    assert f"epoch {onset:,}" in label.text
    low, high = fig.layout.xaxis.range
    assert low < math.log10(onset) < high < math.log10(records[-1]["step"]) + 1
    # The explorer and the report's accuracy figure name the same epochs.
    assert f"phase 2: epochs {onset:,}-{end:,}" in circuit_evolution.attention_explorer(run).layout.title.text
    report = accuracy_figure(run, {})
    assert sorted({s.x0 for s in report.layout.shapes if s.x0 == s.x1}) == [onset, end]


def test_llc_stage_boundaries_are_drawn_through_the_circuit_evolution_axes(sweep_dir, tmp_path):
    import shutil

    import pandas as pd

    from analyses.studies.study_a.llc_stages import boundary_steps, cached_llc, llc_stages
    from analyses.studies.study_a.report import evolution_figure

    run = tmp_path / "run"
    shutil.copytree(read_sweep(sweep_dir)[0][0].out, run)
    plain = circuit_evolution.circuit_evolution_figure(run)  # no LLC table yet: no panel, no boundary
    assert "LLC (whole model)" not in {t.name for t in plain.data} and boundary_steps(plain) == []
    # A series with a known change point: the LLC rises to a peak at epoch 6, then falls.
    table = pd.DataFrame({"step": [0, 2, 4, 6, 8, 10, 12], "llc": [1.0, 2, 3, 4, 3, 2, 1], "se": 0.1})
    fig = circuit_evolution.circuit_evolution_figure(run, llc=table)
    assert boundary_steps(fig) == [6]
    red = [s for s in fig.layout.shapes if s.x0 == s.x1 and s.x0 == 6]
    assert len(red) == circuit_evolution.ROWS + 1  # through every panel, the LLC's included
    (curve,) = [t for t in fig.data if t.name == "LLC (whole model)"]
    assert list(curve.customdata) == list(table["step"]) and list(curve.error_y.array) == [0.2] * 7
    assert any(a.text == "LLC max: new stage at epoch 6" for a in fig.layout.annotations)
    # The run's own LLC evolve table, cached by evolve: found by the study figure and the report's.
    # (A head's curve is cached beside the whole model's, in its own settings folder, and skipped.)
    evolve(run, "llc", progress=False, chains=2, draws=3, burn_in=0, batch_size=0, restrict="L0H0")
    assert cached_llc(run) is None
    evolve(run, "llc", progress=False, chains=2, draws=3, burn_in=0, batch_size=0)
    cached = cached_llc(run)
    assert list(cached["step"]) == list_checkpoints(run)
    expected = [float(s) if s > 0 else None for s in llc_stages(cached).boundaries]
    for figure in (circuit_evolution.circuit_evolution_figure(run), evolution_figure(run, None, False)):
        (curve,) = [t for t in figure.data if t.name == "LLC (whole model)"]
        assert list(curve.y) == pytest.approx(list(cached["llc"]))
        assert boundary_steps(figure) == sorted(x for x in expected if x is not None)
    # A report written elsewhere (`interp report --evolution --out R`, its cache R/cache/RUN) draws
    # the LLC that evolve cached in the run's folder; its own cache wins when it holds one.
    elsewhere = tmp_path / "report-cache"
    assert cached_llc(run, elsewhere).equals(cached)
    (curve,) = [t for t in evolution_figure(run, elsewhere, False).data if t.name == "LLC (whole model)"]
    assert list(curve.y) == pytest.approx(list(cached["llc"]))
    evolve(run, "llc", progress=False, chains=2, draws=3, burn_in=0, batch_size=0, cache=elsewhere, seed=1)
    assert not cached_llc(run, elsewhere)["llc"].equals(cached["llc"])


def test_phase2_on_a_synthetic_stream():
    records = [
        {"step": s, "adv/acc": a, "val/acc": v}
        for s, a, v in [(0, 0.5, 0.5), (10, 0.1, 1.0), (20, 0.7, 0.95), (30, 0.7, 1.0), (40, 1.0, 1.0)]
    ]
    rise = circuit_evolution.phase2(records)
    assert (rise.onset, rise.end) == (10, 40)
    assert circuit_evolution.phase2(records[:3]) is None


def test_a_failing_run_is_reported_and_the_others_finish(tmp_path, capsys):
    (tmp_path / "grid.json").write_text(json.dumps({**GRID, "presets": ["mpsp-1l1h"], "seeds": 1}))
    out = tmp_path / "out"
    # Sabotage one run: its folder already holds another run's config.
    bad = out / "mpsp-1l1h" / "r=0.9" / "seed_0"
    bad.mkdir(parents=True)
    (bad / "config.json").write_text(json.dumps({"format_version": 1, "model": {}, "task": {}, "train": {}}))
    code, _, err = _cli(
        capsys, "sweep", "--grid", tmp_path / "grid.json", "--out", out, "--jobs", "1", "--no-progress"
    )
    assert code == 1
    [line] = err.strip().splitlines()  # one line: the run, and what stopped it
    assert line.startswith(f"error: {bad}: ConfigError") and "the other runs went on" in line
    assert is_done(out / "mpsp-1l1h" / "r=0.5" / "seed_0")


def _sweep_command(grid: Path, out: Path) -> list[str]:
    """`interp sweep` of `grid` into `out` as a subprocess: one job, one thread, no report."""
    return [sys.executable, "-m", "interp", "sweep", "--grid", str(grid), "--out", str(out)] + [
        "--jobs", "1", "--threads", "1", "--no-progress", "--no-report",
    ]  # fmt: skip


def test_interrupted_sweep_restarts_without_retraining_finished_runs(tmp_path):
    (tmp_path / "grid.json").write_text(json.dumps({**GRID, "train": {**GRID["train"], "epochs": 60}}))
    out = tmp_path / "out"
    command = _sweep_command(tmp_path / "grid.json", out)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("**/DONE")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.glob("**/DONE")}
    assert 1 <= len(finished) < 8
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in finished.items())
    assert len(list(out.glob("**/DONE"))) == 8


def test_submitit_local_executor_runs_a_tiny_sweep_end_to_end(tmp_path, capsys):
    grid = {
        **GRID,
        "presets": ["mpsp-1l1h"],
        "axes": {"r": [0.9]},
        "seeds": 2,
        "train": {**GRID["train"], "epochs": 4},
    }
    (tmp_path / "grid.json").write_text(json.dumps(grid))
    out = tmp_path / "out"
    code, stdout, err = _cli(
        capsys,
        "sweep",
        "--grid",
        tmp_path / "grid.json",
        "--out",
        out,
        "--executor",
        "submitit-local",
        "--threads",
        "1",
        "--no-progress",
    )
    assert code == 0, err
    assert "2 runs finished" in stdout
    assert all(is_done(s.out) for s in read_sweep(out)[0])
    assert list((out / "submitit").iterdir())  # the jobs' logs


def test_ctrl_c_stops_the_whole_sweep_with_exit_130(tmp_path):
    # Long enough that the sweep is still training when the signal comes, however loaded the machine.
    (tmp_path / "grid.json").write_text(json.dumps({**GRID, "train": {**GRID["train"], "epochs": 5000}}))
    out = tmp_path / "out"
    command = _sweep_command(tmp_path / "grid.json", out)
    # Ctrl-C as a terminal sends it: test runners (pytest-xdist's workers) may ignore SIGINT, and a
    # sweep keeps a signal ignored at its start ignored (nohup), so the child restores the default.
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("**/checkpoints/LATEST")):
        time.sleep(0.05)
    assert list(out.glob("**/checkpoints/LATEST")) and proc.poll() is None, "the sweep never got going"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert len(list(out.glob("**/DONE"))) < 8  # it stopped instead of moving on to the next run


def test_sweep_device_reaches_every_run_and_a_device_not_here_exits_2(tmp_path, capsys, monkeypatch):
    """`interp sweep --device D` trains every run on D; a GPU this machine lacks, or a device
    that is not cpu / cuda[:N], is refused before anything is written, with one line.
    """
    from analyses.grids import grid_from_dict
    from interp.cli.sweep import run_grid
    from interp.sweep.outcome import Outcome

    class Recording:  # an executor that trains nothing and keeps what it was asked to call
        def map(self, fn, items):
            self.fn = fn
            for item in items:
                yield Outcome(item, {})

    executor = Recording()
    run_grid(grid_from_dict({**GRID, "seeds": 1}), tmp_path / "s", executor, progress=False, device="cuda:1")
    assert executor.fn.keywords == {"device": "cuda:1"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device, message in (
        ("cuda", "torch sees no GPU"),
        ("mps", "is not a device"),
        ("gpu", "is not a device"),
    ):
        code, _, err = _cli(capsys, "sweep", "--grid", "demo", "--out", tmp_path / device, "--device", device)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / device).exists()
    # Sent to a cluster, the GPU is the cluster's: parsed here, not looked for.
    from interp.cli.train import check_device

    check_device("cuda", here=False)
