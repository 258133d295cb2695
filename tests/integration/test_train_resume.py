"""Never lose work: a real `interp train` process killed with SIGKILL (or stopped with SIGTERM)
and resumed ends bit-identical to an uninterrupted run: weights, optimizer state, metrics.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from interp.store.checkpoint import load_checkpoint
from interp.store.run_folder import is_done, read_metrics

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
    "--threads",
    "2",
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
    opt_a, opt_b = ca.train_state["optimizer"]["state"], cb.train_state["optimizer"]["state"]
    for index in opt_a:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt_a[index][name], opt_b[index][name]), (index, name)
    assert read_metrics(a) == read_metrics(b)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    return _train_reference(tmp_path_factory.mktemp("ref") / "run", ARGS)


@pytest.mark.parametrize("kill_after_records", [3, 9])
def test_sigkill_then_resume_is_bit_identical(tmp_path, reference, kill_after_records):
    out = tmp_path / "run"
    proc = _start(out)
    _wait_for_records(out, kill_after_records, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not is_done(out)
    result = _interp("train", "--resume", str(out), "--threads", "2", "--no-progress")
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
