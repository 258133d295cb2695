"""Sweep specs: seed folders and the compact records a repository keeps of a sweep."""

from __future__ import annotations

from interp.store.run_folder import append_metrics, create_run, mark_done
from interp.sweep.specs import (
    RunSpec,
    export_records,
    is_done,
    read_sweep,
    seed_folder,
    seed_folders,
    take_finished_records,
    write_sweep,
)


def _sweep(root):
    specs = [
        RunSpec(seed_folder(root / "a", s), {"kind": "m"}, {"name": "t"}, {"seed": s}, {"seed": s})
        for s in (0, 1)
    ]
    write_sweep(root, specs, {"grid": "test"})
    for spec in specs:
        create_run(spec.out, {"model": spec.model, "task": spec.task, "train": spec.train})
        append_metrics(spec.out, {"step": 0, "val/acc": 0.5})
        (spec.out / "checkpoints").mkdir()  # weights: never part of a record
    mark_done(specs[0].out, {"epochs": 0})
    return specs


def test_seed_folders_are_found_by_seed(tmp_path):
    for s in (3, 1, 10):
        seed_folder(tmp_path, s).mkdir()
    (tmp_path / "seed_x").mkdir()
    assert list(seed_folders(tmp_path)) == [1, 3, 10]


def test_export_keeps_configs_metrics_and_summaries_but_no_weights(tmp_path):
    _sweep(tmp_path / "runs")
    written = export_records(tmp_path / "runs", tmp_path / "results")
    assert [p.name for p in written] == ["seed_0", "seed_1"]
    specs, meta = read_sweep(tmp_path / "results")
    assert meta == {"grid": "test"} and [s.tags["seed"] for s in specs] == [0, 1]
    finished, unfinished = written
    assert sorted(p.name for p in finished.iterdir()) == ["DONE", "config.json", "metrics.jsonl"]
    assert sorted(p.name for p in unfinished.iterdir()) == ["config.json", "metrics.jsonl"]  # no DONE yet


def test_export_again_replaces_records_and_drops_a_stale_summary(tmp_path):
    specs = _sweep(tmp_path / "runs")
    export_records(tmp_path / "runs", tmp_path / "results")
    (specs[0].out / "DONE").unlink()  # e.g. the run was reset and retrained
    append_metrics(specs[0].out, {"step": 5, "val/acc": 0.9})
    export_records(tmp_path / "runs", tmp_path / "results")
    target = tmp_path / "results" / "a" / "seed_0"
    assert not (target / "DONE").exists() and (target / "metrics.jsonl").read_text().count("\n") == 2


def test_finished_records_taken_back_into_a_lost_sweep_are_skipped_and_the_rest_left_alone(tmp_path):
    specs = _sweep(tmp_path / "runs")
    export_records(tmp_path / "runs", tmp_path / "results")
    fresh = tmp_path / "fresh"  # a new machine: the run folders are gone, the records committed
    (fresh / "a" / "seed_1").mkdir(parents=True)  # begun here already: not overwritten
    taken = take_finished_records(tmp_path / "results", fresh)
    assert taken == [fresh / "a" / "seed_0"] and is_done(taken[0])
    assert (taken[0] / "metrics.jsonl").read_text() == (specs[0].out / "metrics.jsonl").read_text()
    assert list((fresh / "a" / "seed_1").iterdir()) == []  # the unfinished run trains as usual
    assert take_finished_records(tmp_path / "results", fresh) == []  # a second call takes nothing
