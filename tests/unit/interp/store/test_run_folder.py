"""Run folders: config.json, metrics.jsonl, DONE and the writer's lock."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.errors import CheckpointError, ConfigError, FormatVersionError, Note
from interp.store.run_folder import (
    append_metrics,
    create_run,
    is_done,
    mark_done,
    read_config,
    read_done,
    read_metrics,
    run_lock,
    truncate_metrics,
)


def test_create_run_records_versions_and_git_sha(run_dir: Path, tiny_config: dict[str, Any]) -> None:
    config = read_config(run_dir)
    assert config["format_version"] == 1
    assert {k: config[k] for k in tiny_config} == tiny_config
    assert set(config["versions"]) == {"interp", "torch", "transformer_lens", "python"}
    assert config["versions"]["interp"] == __import__("interp").__version__
    sha = config["git_sha"]
    assert sha is None or re.fullmatch(r"[0-9a-f]{40}", sha)


def test_create_run_again_with_the_same_config_resumes(run_dir: Path, tiny_config: dict[str, Any]) -> None:
    before = (run_dir / "config.json").read_bytes()
    same = {**tiny_config, "train": {**tiny_config["train"], "betas": (0.9, 0.99)}}  # tuple == list
    assert create_run(run_dir, same) == run_dir
    assert create_run(run_dir, read_config(run_dir)) == run_dir  # reserved keys are ignored
    assert (run_dir / "config.json").read_bytes() == before


def test_create_run_with_a_different_config_names_the_first_difference(
    run_dir: Path, tiny_config: dict[str, Any]
) -> None:
    other = {**tiny_config, "train": {**tiny_config["train"], "lr": 0.01}}
    with pytest.raises(ConfigError) as info:
        create_run(run_dir, other)
    message = str(info.value)
    assert "train.lr" in message and "0.001" in message and "0.01" in message
    assert "--out" in message and "config.json" in message
    with pytest.raises(ConfigError, match="model.extra"):
        create_run(run_dir, {**tiny_config, "model": {**tiny_config["model"], "extra": 1}})


def test_a_float_measured_on_another_cpu_is_the_same_value_but_a_changed_setting_is_not(
    tmp_path: Path, tiny_config: dict[str, Any]
) -> None:
    # Study B's grid lies around a float32 loss: the same model on another CPU measured
    # -9.710512161254883 where the walk's config.json holds -9.7105131149292 (one float32 ulp).
    stored = {**tiny_config, "grid": {"x_range": [-9.7105131149292, -8.7105131149292]}}
    run_dir = create_run(tmp_path / "run", stored)
    before = (run_dir / "config.json").read_bytes()
    moved = {**tiny_config, "grid": {"x_range": [-9.710512161254883, -8.710512161254883]}}
    assert create_run(run_dir, moved) == run_dir
    assert (run_dir / "config.json").read_bytes() == before  # the stored record is kept
    for changed in (-9.7105, -9.7106, -9.7105131149292 * (1 + 2**-18)):
        other = {**tiny_config, "grid": {"x_range": [changed, -8.7105131149292]}}
        with pytest.raises(ConfigError, match="grid.x_range"):
            create_run(run_dir, other)
    with pytest.raises(ConfigError, match="train.lr"):  # a setting, not a measurement
        create_run(run_dir, {**stored, "train": {**tiny_config["train"], "lr": 0.0011}})


def test_read_config_refuses_a_newer_format_version(run_dir: Path) -> None:
    path = run_dir / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": 2}))
    with pytest.raises(FormatVersionError) as info:
        read_config(run_dir)
    assert "config.json" in str(info.value) and "format_version 2" in str(info.value)
    assert "upgrade interp" in str(info.value)


def test_read_config_names_a_file_that_is_not_json(run_dir: Path) -> None:
    (run_dir / "config.json").write_text('{"format_version": 1, "model": ')
    with pytest.raises(CheckpointError) as info:
        read_config(run_dir)
    assert type(info.value) is CheckpointError
    assert "config.json is not valid JSON" in str(info.value)


def test_read_config_of_a_folder_without_one(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"missing .*config\.json"):
        read_config(tmp_path)


def test_metrics_round_trip_exactly(run_dir: Path) -> None:
    records = [{"step": s, "loss": 1 / (s + 3), "acc": {"train": 0.1 + 0.2}} for s in range(5)]
    for record in records:
        append_metrics(run_dir, record)
    assert read_metrics(run_dir) == records
    with pytest.raises(ValueError, match="step"):
        append_metrics(run_dir, {"loss": 1.0})


def test_read_metrics_ignores_a_partial_last_line(run_dir: Path) -> None:
    append_metrics(run_dir, {"step": 0, "loss": 2.0})
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 1, "loss": 1.')
    with pytest.warns(Note, match=r"metrics\.jsonl: skipped its partial last line \(22 bytes"):
        assert read_metrics(run_dir) == [{"step": 0, "loss": 2.0}]


def test_read_metrics_names_a_damaged_line(run_dir: Path) -> None:
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(CheckpointError, match=r"metrics\.jsonl line 2 is not valid JSON"):
        read_metrics(run_dir)


def test_read_metrics_before_any_evaluation(run_dir: Path) -> None:
    assert read_metrics(run_dir) == []
    truncate_metrics(run_dir, 3)  # nothing to truncate, nothing created
    assert not (run_dir / "metrics.jsonl").exists()


def test_truncate_then_resume_gives_the_uninterrupted_file(
    tmp_path: Path, tiny_config: dict[str, Any]
) -> None:
    records = [{"step": s * 10, "loss": math.exp(-s / 3)} for s in range(6)]
    straight = create_run(tmp_path / "straight", tiny_config)
    for record in records:
        append_metrics(straight, record)
    resumed = create_run(tmp_path / "resumed", tiny_config)
    for record in records[:4]:  # killed after logging step 30, last checkpoint at step 20
        append_metrics(resumed, record)
    with open(resumed / "metrics.jsonl", "a") as f:
        f.write('{"step": 40, "lo')
    with pytest.warns(Note, match="partial last line"):
        truncate_metrics(resumed, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the torn line is gone: no note any more
        assert read_metrics(resumed) == records[:3]
    for record in records[3:]:
        append_metrics(resumed, record)
    assert (resumed / "metrics.jsonl").read_bytes() == (straight / "metrics.jsonl").read_bytes()


@settings(max_examples=30, deadline=None)
@given(
    losses=st.lists(st.floats(allow_nan=False), max_size=8),
    cut=st.integers(min_value=-1, max_value=8),
)
def test_truncate_keeps_exactly_the_records_up_to_the_step(losses: list[float], cut: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        records = [{"step": s, "loss": loss} for s, loss in enumerate(losses)]
        for record in records:
            append_metrics(folder, record)
        truncate_metrics(folder, cut)
        assert read_metrics(folder) == [r for r in records if r["step"] <= cut]


def test_done_round_trip(run_dir: Path) -> None:
    assert not is_done(run_dir)
    with pytest.raises(CheckpointError, match="DONE"):
        read_done(run_dir)
    mark_done(run_dir, {"final_step": 10, "val_acc": 0.75})
    assert is_done(run_dir)
    assert read_done(run_dir) == {"final_step": 10, "val_acc": 0.75}


LOCK_HOLDER = """
import sys
from interp.store.run_folder import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_run_lock_refuses_a_second_writer(run_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointError) as info:
            with run_lock(run_dir):
                pass
        assert f"run folder {run_dir} is being written by another process (pid {child.pid})" in str(
            info.value
        )
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    with run_lock(run_dir) as locked:  # released when the holder exits
        assert locked == run_dir


def test_run_lock_is_released_when_the_holder_is_killed(run_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    child.kill()
    child.wait(timeout=30)
    assert child.stdin is not None
    child.stdin.close()
    child.stdout.close()
    with run_lock(run_dir):
        pass


def test_run_lock_creates_the_folder(tmp_path: Path) -> None:
    with run_lock(tmp_path / "new" / "run") as folder:
        assert (folder / ".lock").read_text().strip().isdigit()


def test_the_thread_count_is_recorded_outside_the_matched_config_and_a_resume_with_another_notes_it(tmp_path):
    import torch

    from interp.errors import Note
    from interp.store.run_folder import read_sessions
    from interp.store.session import open_run

    run_dir, config = tmp_path / "run", {"train": {"lr": 1e-3}}
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with open_run(run_dir, config) as run:
            run.resume()
            run.save(0, {"w": torch.ones(2)})
        assert read_config(run_dir)["threads"] == 1
        torch.set_num_threads(2)
        with open_run(run_dir, config) as run:  # another thread count is no config mismatch...
            with pytest.warns(Note, match="started with 1 torch threads and resumes with 2.*--threads 1"):
                assert run.resume().step == 0  # ... but resuming says it will not be bit-exact
        with open_run(run_dir, config) as run:
            torch.set_num_threads(1)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                run.resume()  # the same count: no note
    finally:
        torch.set_num_threads(threads)
    assert [s["threads"] for s in read_sessions(run_dir)] == [1, 2, 1]
    assert [s["start_step"] for s in read_sessions(run_dir)] == [0, 0, 0]


def test_the_machine_is_recorded_with_the_config_and_each_session_and_a_resume_elsewhere_notes_it(tmp_path):
    """The CPU a run computes on is recorded (outside the matched config) and a session that
    resumes on another CPU than the last session's says the run will not be bit-identical.
    """
    import torch

    from interp.errors import Note
    from interp.store.provenance import machine
    from interp.store.run_folder import read_sessions
    from interp.store.session import open_run

    here = machine()
    assert here["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and "cpu" in here
    run_dir, config = tmp_path / "run", {"train": {"lr": 1e-3}}
    with open_run(run_dir, config) as run:
        run.resume()
        run.save(0, {"w": torch.ones(2)})
    assert read_config(run_dir)["machine"] == here and read_sessions(run_dir)[-1]["machine"] == here
    with open_run(run_dir, config) as run, warnings.catch_warnings():
        warnings.simplefilter("error")
        run.resume()  # the same machine: no note
    sessions = run_dir / "sessions.jsonl"
    records = [json.loads(line) for line in sessions.read_text().splitlines()]
    records[-1]["machine"] = {"cpu": "Another CPU", "cpu_capability": "NO AVX"}  # as if it ran elsewhere
    sessions.write_text("".join(json.dumps(r) + "\n" for r in records))
    with open_run(run_dir, {**config, "machine": "ignored"}) as run:  # a reserved key, never matched
        with pytest.warns(Note, match=r"ran on Another CPU \(NO AVX\) and resumes on .*not be bit-identical"):
            assert run.resume().step == 0
    assert read_sessions(run_dir)[-1]["machine"] == here
