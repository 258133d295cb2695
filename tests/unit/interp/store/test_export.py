"""Weights-only checkpoint series for the repository (interp/store/export.py)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from analyses import load_subject
from interp.errors import CheckpointError
from interp.store import export_run, export_weights, list_checkpoints, load_checkpoint, save_checkpoint
from interp.store.export import RUN_RECORDS, dense_window, log_spaced
from interp.store.run_folder import FORMAT_VERSION, run_machines
from interp.training import TrainConfig, train
from tasks import MPSPTask
from tests.builders import tiny_transformer


def test_log_spacing_keeps_the_ends_and_spreads_the_rest():
    steps = [0, 1, 2, 3, 5, 7, 10, 14, 20, 28, 40, 100, 1000, 2000, 3000, 10000]
    chosen = log_spaced(steps, 5)
    assert chosen[0] == 0 and chosen[-1] == 10000 and len(set(chosen)) == 5
    assert log_spaced(steps[:3], 5) == steps[:3]
    with pytest.raises(ValueError, match="count must be >= 2"):
        log_spaced(steps, 1)


def test_a_dense_window_keeps_every_step_inside_and_log_spaced_ones_outside():
    steps = list(range(0, 1501, 10))
    chosen = dense_window(steps, (300, 500), count=6)
    assert [s for s in chosen if 300 <= s <= 500] == list(range(300, 501, 10))
    outside = [s for s in chosen if s < 300 or s > 500]
    assert (
        outside == log_spaced([s for s in steps if s < 300 or s > 500], 6)
        and 0 in outside
        and 1500 in outside
    )


def test_exported_weights_load_and_analyse_like_the_originals(tmp_path):
    task = MPSPTask(r=0.9, vocab=8, n_train=64, n_val=16, n_adv=16)
    run = tmp_path / "run"
    train(run, tiny_transformer(task), task, TrainConfig(epochs=20, eval_every=5, checkpoint_log_points=8))
    dest = tmp_path / "results" / "run"
    dest.mkdir(parents=True)
    shutil.copyfile(run / "config.json", dest / "config.json")

    steps = export_weights(run, dest, count=4)
    assert steps == list_checkpoints(dest) and len(steps) == 4 and steps[-1] == list_checkpoints(run)[-1]
    for step in steps:
        original, copy = (load_checkpoint(r / "checkpoints" / f"step_{step:06d}") for r in (run, dest))
        assert copy.train_state is None and original.train_state is not None  # weights only
        assert copy.meta == original.meta
        for name, tensor in original.state_dict.items():
            assert torch.equal(copy.state_dict[name], tensor), name
    # The copy is a run an analysis opens (its latest checkpoint, splits checked against the meta).
    assert load_subject(dest).step == steps[-1]
    # A second export with fewer steps leaves exactly those.
    assert export_weights(run, dest, count=2) == list_checkpoints(dest) == [steps[0], steps[-1]]
    # Or exactly the steps asked for; a step without a checkpoint is refused, naming it.
    assert export_weights(run, dest, steps=steps[1:3]) == list_checkpoints(dest) == steps[1:3]
    with pytest.raises(CheckpointError, match=r"no checkpoint at steps \[7777\]"):
        export_weights(run, dest, steps=[steps[0], 7777])


def test_export_says_what_is_missing(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoints"):
        export_weights(tmp_path, tmp_path / "dest")


def test_a_runs_compact_record_is_one_set_of_files_and_a_resumable_copy_adds_its_newest_checkpoint(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    files = {
        "config.json": f'{{"format_version": {FORMAT_VERSION}}}',
        "metrics.jsonl": '{"step": 0}\n',
        "compute.json": '{"cpu_seconds": 1.0}',
    }
    for name, text in {**files, "sessions.jsonl": '{"step": 0}\n', ".lock": "", "notes.txt": "x"}.items():
        (run / name).write_text(text)
    for step in (0, 5):
        save_checkpoint(run, step, {"w": torch.full((2,), float(step))}, train_state={"step": step})

    record = tmp_path / "record"
    record.mkdir()
    (record / "DONE").write_text("{}")  # an earlier export's, of a run that is not done now
    assert export_run(run, record) == record
    # The record: what RUN_RECORDS names and the run has; no lock, session log, other file or weights.
    assert sorted(p.name for p in record.iterdir()) == sorted(files) == sorted(set(RUN_RECORDS) - {"DONE"})
    assert all((record / name).read_text() == text for name, text in files.items())
    (run / "DONE").write_text('{"steps": 5}')
    export_run(run, record)
    assert (record / "DONE").read_text() == '{"steps": 5}'

    carried = export_run(run, tmp_path / "carried", weights=True)
    assert (
        list_checkpoints(carried) == [5]
        and (carried / "checkpoints" / "LATEST").read_text() == "step_000005\n"
    )
    copy = load_checkpoint(carried / "checkpoints" / "step_000005")
    assert torch.equal(copy.state_dict["w"], torch.full((2,), 5.0)) and copy.train_state == {"step": 5}
    assert (carried / "sessions.jsonl").read_text() == '{"step": 0}\n' and not (carried / ".lock").exists()
    with pytest.raises(CheckpointError, match="has no checkpoint to carry"):
        export_run(record, tmp_path / "nothing", weights=True)


def test_a_record_names_the_machines_its_session_log_names_once_each_in_order(tmp_path):
    run, here, there = (
        tmp_path / "run",
        {"cpu": "A", "cpu_capability": "AVX2"},
        {"cpu": "B", "cpu_capability": "AVX512"},
    )
    run.mkdir()
    (run / "compute.json").write_text('{"cpu_seconds": 3.0, "how": "measured"}')
    sessions = [
        {"start_step": 0, "machine": here},
        {"start_step": 9, "machine": there},
        {"start_step": 20, "machine": here},
    ]
    (run / "sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    record = export_run(run, tmp_path / "record")
    assert not (record / "sessions.jsonl").exists()
    assert json.loads((record / "compute.json").read_text()) == {
        "cpu_seconds": 3.0,
        "how": "measured",
        "machines": [here, there],
    }
    assert run_machines(run) == run_machines(record) == [here, there]
    assert run_machines(tmp_path) == []  # neither a session log nor a record: nothing said
