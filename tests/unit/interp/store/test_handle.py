"""A run opened for reading (`interp.store.handle`): steps, checkpoints by step or LATEST, result
folders, whether it can be written, and the one split-digest check (shared with resuming).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from interp.errors import CheckpointError, ConfigError, Note
from interp.store.checkpoint import save_checkpoint
from interp.store.handle import DIGESTS_KEY, RunHandle, check_digests, read_run, writable
from interp.store.run_folder import create_run
from interp.store.session import open_run
from tests.mounts import remount, require_root, tmpfs

DIGESTS = {"train": "aaaa", "val": "bbbb"}


def make_run(folder: Path, steps: tuple[int, ...] = (0, 10, 100)) -> Path:
    create_run(folder, {"model": {"d": 2}, "train": {"data_seed": 0}})
    for step in steps:
        state = {"w": torch.full((2,), float(step))}
        save_checkpoint(folder, step, state, meta={DIGESTS_KEY: DIGESTS})
    return folder


def test_steps_and_checkpoints_by_step_and_latest(tmp_path):
    run = read_run(make_run(tmp_path / "run"))
    assert run.steps == [0, 10, 100]
    assert run.checkpoint_path(10) == tmp_path / "run" / "checkpoints" / "step_000010"
    assert run.checkpoint_path() == run.latest == tmp_path / "run" / "checkpoints" / "step_000100"
    ckpt = run.load_checkpoint(10)
    assert ckpt.step == 10 and torch.equal(ckpt.state_dict["w"], torch.full((2,), 10.0))
    assert run.load_checkpoint().step == 100
    assert ckpt.config is run.config  # one read for every checkpoint
    message = str(pytest.raises(CheckpointError, run.checkpoint_path, 5).value)
    assert "step 5" in message and "nearest checkpoints are at steps 0 and 10, of 3" in message


@pytest.mark.parametrize(
    "which, steps",
    [
        (None, [0, 10, 100, 300]),
        ("10-100", [10, 100]),
        ("0,50-400", [0, 100, 300]),
        (" 300 , 0 ", [0, 300]),
        ([100, 0, 100], [0, 100]),
    ],
)
def test_select_steps_takes_steps_and_ranges(tmp_path, which, steps):
    assert read_run(make_run(tmp_path / "run", (0, 10, 100, 300))).select_steps(which) == steps


@pytest.mark.parametrize(
    "which, error, message",
    [
        ("5", CheckpointError, "nearest checkpoints are at steps 0 and 10"),
        ([101], CheckpointError, "nearest checkpoints are at steps 100 and 300"),
        ("400-500", CheckpointError, "no checkpoint in steps 400-500"),
        ("10-x", ConfigError, "'10-x' is not a list of steps and ranges"),
        ("", ConfigError, "is not a list of steps"),
    ],
)
def test_select_steps_refuses_steps_without_a_checkpoint(tmp_path, which, error, message):
    run = read_run(make_run(tmp_path / "run", (0, 10, 100, 300)))
    assert message in str(pytest.raises(error, run.select_steps, which).value)


def test_a_checkpoint_folder_opens_its_run_and_means_itself(tmp_path):
    make_run(tmp_path / "run")
    run = RunHandle.open(tmp_path / "run" / "checkpoints" / "step_000010")
    assert run.run_dir == tmp_path / "run"
    assert run.checkpoint_path() == tmp_path / "run" / "checkpoints" / "step_000010"
    assert run.load_checkpoint().step == 10
    assert run.steps == [0, 10, 100]
    assert RunHandle.open(run) is run


def test_opening_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        RunHandle.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="neither a checkpoint folder nor a run folder"):
        RunHandle.open(tmp_path / "empty")


def test_the_config_is_read_once(tmp_path, monkeypatch):
    run = read_run(make_run(tmp_path / "run"))
    reads = []
    original = Path.read_text
    monkeypatch.setattr(
        Path, "read_text", lambda self, *a, **k: reads.append(self.name) or original(self, *a, **k)
    )
    for step in run.steps:
        run.load_checkpoint(step)
    assert run.config["train"] == {"data_seed": 0}
    assert reads.count("config.json") == 1


def test_result_folder_with_and_without_a_cache(tmp_path):
    run = read_run(make_run(tmp_path / "run"))
    assert run.result_folder("patch", 10) == tmp_path / "run" / "analyses" / "patch" / "step_000010"
    cache = tmp_path / "elsewhere" / "cache"
    assert run.result_folder("patch", 10, cache) == cache / "patch" / "step_000010"
    assert run.result_folder("llc", 10, settings="restrict=L0H0") == (
        tmp_path / "run" / "analyses" / "llc" / "restrict=L0H0" / "step_000010"
    )


def test_writable_is_false_on_a_read_only_run(tmp_path):
    require_root("the read-only run folder test")
    with tmpfs(tmp_path / "ro", "1m") as disk:
        run = read_run(make_run(disk / "run", (0,)))
        assert run.writable and writable(run.result_folder("patch", 0))
        remount(disk, "ro")
        try:
            assert not run.writable
            assert not writable(run.result_folder("patch", 0))  # not created yet: its parents decide
            assert writable(tmp_path)
        finally:
            remount(disk, "rw")


def test_a_digest_mismatch_is_refused_naming_both_or_noted_when_forced(tmp_path):
    where = tmp_path / "ckpt"
    message = str(
        pytest.raises(CheckpointError, check_digests, DIGESTS, {**DIGESTS, "val": "cccc"}, where).value
    )
    assert "'val'" in message and "bbbb" in message and "cccc" in message and str(where) in message
    message = str(pytest.raises(CheckpointError, check_digests, DIGESTS, {"train": "aaaa"}, where).value)
    assert "['train', 'val']" in message and "['train']" in message
    with pytest.warns(Note, match="cccc"):
        check_digests(DIGESTS, {**DIGESTS, "val": "cccc"}, where, force=True)
    check_digests(DIGESTS, dict(DIGESTS), where)  # the same data: nothing to say


def test_resume_refuses_other_data_with_the_same_check(tmp_path):
    folder = tmp_path / "run"
    config = {"model": {"d": 2}, "train": {"data_seed": 0}}
    with open_run(folder, config, DIGESTS) as session:
        session.save(0, {"w": torch.zeros(2)})
    with open_run(folder, config, {**DIGESTS, "train": "ffff"}) as session:
        message = str(pytest.raises(CheckpointError, session.resume).value)
    assert "'train'" in message and "aaaa" in message and "ffff" in message and "--out" in message
    stored = json.loads((folder / "checkpoints" / "step_000000" / "manifest.json").read_text())["meta"]
    assert stored == {DIGESTS_KEY: DIGESTS}
