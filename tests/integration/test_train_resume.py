"""Never lose work: a real `interp train` process killed with SIGKILL (or stopped with SIGTERM)
and resumed ends bit-identical to an uninterrupted run: weights (to the byte of
model.safetensors), optimizer state, metrics. Kills land between evaluations, during a
checkpoint write and during a metrics append (a torn last line); a full disk mid-checkpoint is a
real small tmpfs (root only). The many-moment property test is marked slow.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyses.report.page import accuracy_figure
from interp.errors import Note
from interp.store.checkpoint import load_checkpoint
from interp.store.run_folder import is_done, read_metrics
from tests.mounts import remount, require_root, tmpfs

# Tiny but real: a 2-layer model with minibatches, so the minibatch RNG must resume too.
ARGS = [
    "--preset",
    "mpsp-2l1h",
    "--vocab",
    "12",
    "--n",
    "4",
    "--n-train",
    "256",
    "--n-val",
    "64",
    "--n-adv",
    "64",
    "--epochs",
    "40",
    "--batch-size",
    "100",
    "--eval-every",
    "3",
    "--checkpoint-every",
    "5",
    # One thread: the suite runs two workers on two cores, and a two-thread run beside another
    # worker spins for a core it does not get (3x slower under load; a resume hit the timeout).
    "--threads",
    "1",
    "--no-progress",
]


def _interp(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "interp", *args], capture_output=True, text=True, timeout=300, **kwargs
    )


def _start(out: Path, args: list[str] = ARGS) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "interp", "train", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _train_reference(out: Path, args: list[str]) -> Path:
    result = _interp("train", *args, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _wait_for_records(out: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        path = out / "metrics.jsonl"
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.01)
    raise AssertionError(
        f"training did not reach {n} records: {proc.poll()} {proc.stderr.read() if proc.stderr else ''}"
    )


def _assert_identical(a: Path, b: Path) -> None:
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    assert ca.step == cb.step == 40
    assert ca.state_dict.keys() == cb.state_dict.keys()
    for key in ca.state_dict:
        assert torch.equal(ca.state_dict[key], cb.state_dict[key]), key
    # Written by different processes, the files are byte-identical too (so are their manifests).
    for name in ("model.safetensors", "manifest.json"):
        assert (ca.path / name).read_bytes() == (cb.path / name).read_bytes(), name
    opt_a, opt_b = ca.train_state["optimizer"]["state"], cb.train_state["optimizer"]["state"]
    for index in opt_a:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt_a[index][name], opt_b[index][name]), (index, name)
    assert read_metrics(a) == read_metrics(b)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return _train_reference(tmp_path_factory.mktemp("ref") / "run", ARGS)


@pytest.mark.parametrize("kill_after_records", [3, pytest.param(9, marks=pytest.mark.slow)])
def test_sigkill_then_resume_is_bit_identical(tmp_path, reference, kill_after_records):
    out = tmp_path / "run"
    proc = _start(out)
    _wait_for_records(out, kill_after_records, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not is_done(out)
    result = _interp("train", "--resume", str(out), "--threads", "1", "--no-progress")
    assert result.returncode == 0, result.stderr
    _assert_identical(reference, out)


def test_sigterm_saves_exits_143_and_resume_is_bit_identical(tmp_path, reference):
    out = tmp_path / "run"
    proc = _start(out)
    _wait_for_records(out, 4, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    stopped_at = load_checkpoint(out).step
    assert read_metrics(out)[-1]["step"] <= stopped_at < 40
    result = _interp("train", *ARGS, "--out", str(out))  # the same command resumes
    assert result.returncode == 0, result.stderr
    _assert_identical(reference, out)


def test_finished_run_is_not_retrained(reference):
    before = (reference / "DONE").stat().st_mtime_ns, (reference / "metrics.jsonl").read_bytes()
    result = _interp("train", "--resume", str(reference), "--no-progress")
    assert result.returncode == 0, result.stderr
    assert ((reference / "DONE").stat().st_mtime_ns, (reference / "metrics.jsonl").read_bytes()) == before


VECTORIZED = [*ARGS, "--seeds", "0-1", "--vectorize"]


@pytest.fixture(scope="module")
def vectorized_reference(tmp_path_factory) -> Path:
    return _train_reference(tmp_path_factory.mktemp("vref") / "group", VECTORIZED)


# Over the default suite's budget on 2 cores (~20-35 s): `make test-slow`, which CI also runs.
@pytest.mark.slow
def test_vectorized_group_killed_then_rerun_is_bit_identical(tmp_path, vectorized_reference):
    out = tmp_path / "group"
    proc = _start(out, VECTORIZED)
    _wait_for_records(out / "seed_1", 6, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (is_done(out / "seed_0") and is_done(out / "seed_1"))
    result = _interp("train", *VECTORIZED, "--out", str(out))  # the same command resumes the group
    assert result.returncode == 0, result.stderr
    for seed in (0, 1):
        _assert_identical(vectorized_reference / f"seed_{seed}", out / f"seed_{seed}")


@pytest.mark.slow
def test_vectorized_group_stopped_by_sigterm_saves_every_seed_and_resumes_bit_identical(
    tmp_path, vectorized_reference
):
    out = tmp_path / "group"
    proc = _start(out, VECTORIZED)
    _wait_for_records(out / "seed_1", 4, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    steps = {load_checkpoint(out / f"seed_{seed}").step for seed in (0, 1)}
    assert len(steps) == 1 and steps.pop() < 40  # both seeds saved at the step they stopped at
    result = _interp("train", *VECTORIZED, "--out", str(out))
    assert result.returncode == 0, result.stderr
    for seed in (0, 1):
        _assert_identical(vectorized_reference / f"seed_{seed}", out / f"seed_{seed}")


# Kills at chosen moments --------------------------------------------------------------------


def _checkpoint_dirs(out: Path, vectorized: bool) -> list[Path]:
    return [out / f"seed_{s}" / "checkpoints" for s in (0, 1)] if vectorized else [out / "checkpoints"]


def _writing(dirs: list[Path]) -> bool:
    """Whether a checkpoint is being written now: its hidden temporary folder exists."""
    for folder in dirs:
        try:
            if any(entry.name.startswith(".tmp-") for entry in os.scandir(folder)):
                return True
        except FileNotFoundError:
            pass
    return False


@pytest.mark.parametrize("vectorized", [False, True], ids=["single", "vectorized"])
def test_sigkill_during_a_checkpoint_write_then_resume_is_bit_identical(
    tmp_path, reference, vectorized_reference, vectorized
):
    out = tmp_path / "run"
    args = VECTORIZED if vectorized else ARGS
    proc = _start(out, args)
    dirs = _checkpoint_dirs(out, vectorized)
    deadline = time.time() + 120
    while not _writing(dirs) and proc.poll() is None and time.time() < deadline:
        pass  # poll as fast as possible: a checkpoint write takes a few milliseconds
    assert proc.poll() is None, "training ended before a checkpoint write was seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for folder in dirs:  # what the kill left: the last complete checkpoint still loads
        if (folder / "LATEST").exists():
            assert load_checkpoint(folder.parent).step >= 0
    result = _interp("train", *args, "--out", str(out))
    assert result.returncode == 0, result.stderr
    if vectorized:
        for seed in (0, 1):
            _assert_identical(vectorized_reference / f"seed_{seed}", out / f"seed_{seed}")
    else:
        _assert_identical(reference, out)
    for folder in dirs:  # and the killed write's leftovers were cleaned up by the resumed run
        assert not [e.name for e in os.scandir(folder) if e.name.startswith(".")]


def _torn_append(path: Path) -> int:
    """Kill a real process in the middle of appending one large record to `path` (a JSON-lines
    log); returns the length of the partial line it left. Retries if the kill came too late.
    """
    code = (
        "import sys\nfrom interp.store.atomic import append_jsonl\n"
        "append_jsonl(sys.argv[1], {'step': 10**9, 'pad': 'x' * (64 * 2**20)})"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(20):
        size = path.stat().st_size
        writer = subprocess.Popen([sys.executable, "-c", code, str(path)], env=env)
        while writer.poll() is None and path.stat().st_size <= size:
            pass
        writer.kill()
        writer.wait()
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            return len(data) - size
        os.truncate(path, size)  # the append finished before the kill: undo it and try again
    raise AssertionError("could not kill a writer in the middle of an append in 20 tries")


def test_a_kill_during_a_metrics_append_leaves_a_torn_line_that_readers_skip_and_resume_rewrites(
    tmp_path, reference
):
    out = tmp_path / "run"
    proc = _start(out)
    _wait_for_records(out, 6, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    complete = (out / "metrics.jsonl").read_bytes()
    complete = complete[: complete.rfind(b"\n") + 1]
    torn = _torn_append(out / "metrics.jsonl")
    assert torn > 0 and (out / "metrics.jsonl").read_bytes().startswith(complete)
    records = [json.loads(line) for line in complete.splitlines()]
    with pytest.warns(Note, match=r"skipped its partial last line \(\d+ bytes"):
        assert read_metrics(out) == records
    with pytest.warns(Note, match="partial last line"):
        accuracy_figure(out)  # the report's reader too
    result = _interp("train", "--resume", str(out), "--threads", "1", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "note: " in result.stderr and "partial last line" in result.stderr
    assert not (out / "metrics.jsonl").read_bytes().endswith(b"x")
    steps = [r["step"] for r in read_metrics(out)]
    assert steps == sorted(set(steps))  # nothing logged twice
    _assert_identical(reference, out)  # ... and nothing lost


def test_a_full_disk_mid_checkpoint_stops_with_one_line_and_resumes_bit_identical(tmp_path, reference):
    require_root("the full-disk test")
    with tmpfs(tmp_path / "disk", "3m") as disk:  # room for three checkpoints of this run, not four
        out = disk / "run"
        result = _interp("train", *ARGS, "--out", str(out))
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert lines[0].startswith(f"error: no space left on the device writing {out / 'checkpoints'}/")
        assert lines[0].endswith("free some space and run the same command to resume")
        left = [
            p.name
            for p in out.rglob("*")
            if p.name != ".lock" and (p.name.startswith(".") or ".tmp" in p.name)
        ]
        assert left == [], left  # no temporary file or folder left behind
        previous = load_checkpoint(out)  # the previous checkpoint still loads (and verifies)
        assert 0 <= previous.step < 40 and not is_done(out)
        assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")
        remount(disk, "size=64m")  # space freed
        result = _interp("train", *ARGS, "--out", str(out))
        assert result.returncode == 0, result.stderr
        _assert_identical(reference, out)


# The many-moment version: random kills of single-seed and vectorised training -----------------


@pytest.mark.slow
@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    vectorized=st.booleans(),
    records=st.integers(1, 13),
    delay=st.floats(0.0, 0.3),
    kills=st.integers(1, 3),
)
def test_kills_at_random_moments_then_resume_are_bit_identical(
    tmp_path_factory, reference, vectorized_reference, vectorized, records, delay, kills
):
    out = tmp_path_factory.mktemp("kill") / "run"
    args = VECTORIZED if vectorized else ARGS
    watched = out / "seed_1" if vectorized else out
    for k in range(kills):  # kill, resume, kill again: every resume must pick up exactly
        proc = _start(out, args)
        try:
            _wait_for_records(watched, records + 4 * k, proc)
        except AssertionError:
            break  # finished before this moment
        time.sleep(delay * random.Random(k).random())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    result = _interp("train", *args, "--out", str(out))
    assert result.returncode == 0, result.stderr
    if vectorized:
        for seed in (0, 1):
            _assert_identical(vectorized_reference / f"seed_{seed}", out / f"seed_{seed}")
    else:
        _assert_identical(reference, out)
