"""The preregistered choice of study A's three dissection series, and the checkpoints a series
keeps (analyses/studies/study_a/series_choice.py), on run states and step lists built here.
"""

from __future__ import annotations

from pathlib import Path

from analyses.report.records import FINISHED, UNFINISHED, RunState
from analyses.studies.study_a.series_choice import MAX_CHECKPOINTS, OUTSIDE, choose_series, series_steps
from interp.sweep.specs import RunSpec


def run(
    r: float, seed: int, *, rule=None, memorised=None, adv=0.1, status=FINISHED, preset="mpsp-2l2h", out=None
):
    spec = RunSpec(out or Path(f"/nowhere/{r}/{seed}"), {}, {"name": "mpsp"}, {}, {})
    spec.tags.update({"preset": preset, "r": r, "seed": seed})
    milestones = {"rule": {"step": rule, "kept": False}, "memorized": {"step": memorised}}
    return RunState("g", spec, status, 4000, {"val/acc": 1.0, "adv/acc": 0.0}, {"adv/acc": adv}, milestones)


def chosen(stage_1, stage_2=()):
    return {
        c.name: (c.run.spec.tags["seed"] if c.run else None, c.why)
        for c in choose_series(stage_1, list(stage_2))
    }


def test_the_lowest_seed_index_that_reached_the_rule_once_every_lower_one_finished():
    cell = [
        run(0.9, 0),
        run(0.9, 1, rule=900),
        run(0.9, 2, rule=500),
        run(0.9, 3, preset="mpsp-1l1h", rule=100),
    ]
    assert chosen(cell)["wd-headline r=0.9"][0] == 1
    waiting = [run(0.9, 0, status=UNFINISHED), run(0.9, 1, rule=900)]
    seed, why = chosen(waiting)["wd-headline r=0.9"]
    assert seed is None and "seed index 0 has not finished" in why


def test_at_r_05_the_best_adv_accuracy_only_once_the_whole_cell_finished_without_the_rule():
    cell = [run(0.5, 0, adv=0.3), run(0.5, 1, adv=0.7), run(0.5, 2, adv=0.7)]
    seed, why = chosen(cell)["wd-headline r=0.5"]
    assert seed == 1 and "highest best adv accuracy" in why  # a tie goes to the lower index
    seed, _ = chosen([*cell[:2], run(0.5, 2, adv=0.9, status=UNFINISHED)])["wd-headline r=0.5"]
    assert seed is None
    assert chosen([*cell, run(0.5, 3, rule=700)])["wd-headline r=0.5"][0] == 3  # a rule beats any accuracy


def test_stage_2s_series_is_the_lowest_r_09_run_that_memorised_without_the_rule():
    stage_2 = [
        run(0.9, 0, memorised=300, rule=900),
        run(0.9, 1),
        run(0.9, 2, memorised=400),
        run(0.5, 0, memorised=1),
    ]
    assert chosen([], stage_2)["replication r=0.9 memorised"][0] == 2
    assert chosen([], [])["replication r=0.9 memorised"] == (None, "the cell has no runs yet")


def test_a_series_keeps_phase_2_densely_and_at_most_40_checkpoints():
    steps = list(range(0, 4001, 25))
    kept = series_steps(steps, 2000, 2600)
    window = [s for s in steps if 1900 <= s <= 2700]
    assert len(kept) == MAX_CHECKPOINTS and kept[0] == 0 and kept[-1] == 4000
    assert {1900, 2700} <= set(kept) and len(
        [s for s in kept if 1900 <= s <= 2700]
    ) == MAX_CHECKPOINTS - OUTSIDE
    assert len(window) > MAX_CHECKPOINTS - OUTSIDE  # so it was thinned
    short = series_steps(steps, 1000, 1100)  # a short phase 2: every checkpoint in it
    assert set(range(900, 1201, 25)) <= set(short) and len(short) <= MAX_CHECKPOINTS
    assert len(series_steps(steps, None, None)) == MAX_CHECKPOINTS


def test_with_a_machine_only_the_runs_it_trained_are_candidates(tmp_path):
    import json

    here, there = {"cpu": "Xeon", "cpu_capability": "AVX512"}, {"cpu": "EPYC", "cpu_capability": "AVX2"}

    def on(machines, seed, rule=None):
        out = tmp_path / f"seed_{seed}"
        out.mkdir()
        (out / "compute.json").write_text(json.dumps({"cpu_seconds": 1.0, "machines": machines}))
        return run(0.9, seed, rule=rule, out=out)

    cell = [
        on([there], 0, rule=300),
        on([there, here], 1, rule=400),  # resumed here: neither machine trained all of it
        on([], 2, rule=500),  # a record that names no machine
        on([here], 3),
        on([here], 4, rule=900),
    ]
    assert chosen(cell)["wd-headline r=0.9"][0] == 0  # the rule as preregistered
    picked = {c.name: c.run for c in choose_series(cell, [], machine=here)}["wd-headline r=0.9"]
    assert picked.spec.tags["seed"] == 4
    assert {c.name: c.run for c in choose_series(cell, [], machine=there)}["wd-headline r=0.9"].spec.tags[
        "seed"
    ] == 0


SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "long_runs" / "study_a_series.py"


def _folder(path: Path, metrics: list[dict]) -> Path:
    import json

    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "DONE").write_text(json.dumps({"milestones": {"rule": {"step": metrics[-1]["step"]}}}))
    return path


def test_check_says_equal_or_the_largest_difference_and_exits_accordingly(tmp_path):
    import subprocess
    import sys

    metrics = [{"step": 0, "adv/acc": 0.5}, {"step": 25, "adv/acc": 0.75}]
    record = _folder(tmp_path / "record", metrics)
    same = _folder(tmp_path / "same", metrics)
    moved = _folder(tmp_path / "moved", [metrics[0], {"step": 25, "adv/acc": 0.5}])

    def check(out):
        return subprocess.run(
            [sys.executable, str(SCRIPT), "check", str(record), str(out)], capture_output=True, text=True
        )

    done = check(same)
    assert done.returncode == 0 and "equal: all 2 evaluations" in done.stdout
    done = check(moved)
    assert done.returncode == 1 and "the largest difference is 0.25 (adv/acc at epoch 25)" in done.stdout
    done = check(tmp_path / "absent")
    assert done.returncode == 2 and "not a finished run" in done.stderr and "Traceback" not in done.stderr
