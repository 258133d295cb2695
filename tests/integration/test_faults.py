"""Nothing lost under faults, each for real: diverged runs, concurrent sweeps and a killed sweep
worker, read-only run folders, data that does not match, and runs too large for memory.

(Full disks, torn logs and kills at any moment are in `test_train_resume.py`, beside the
references they compare against.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from analyses import REGISTRY, get_analysis, load_subject
from interp.cli import main
from interp.errors import CheckpointError, ConfigError, Note
from interp.store.checkpoint import load_checkpoint, save_checkpoint
from interp.store.formats import first_nonfinite
from interp.store.run_folder import is_done, is_locked, read_done, read_metrics, read_sessions
from interp.sweep.specs import read_sweep
from interp.training import TrainConfig, train
from interp.training.memory import check_memory
from models import build_model, preset_config
from tasks import MPSPTask
from tests.builders import size_args
from tests.mounts import remount, require_root, tmpfs

TASK = {"vocab": 12, "n": 4, "n_train": 128, "n_val": 32, "n_adv": 32}
TINY = ["--vocab", "12", "--n", "4", "--n-train", "128", "--n-val", "32", "--n-adv", "32"]
# lr 1e7 on mpsp-1l1h: step 1 is finite, step 2 makes embed.W_E NaN (deterministic on the CPU).
DIVERGING = [
    "--preset", "mpsp-1l1h", *TINY, "--epochs", "12", "--lr", "1e7", "--eval-every", "1",
    "--eval-log-points", "0", "--checkpoint-every", "1", "--checkpoint-log-points", "0",
    "--threads", "1", "--no-progress",
]  # fmt: skip


def _interp(*args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "interp", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kwargs,
    )


def _cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under `folder` but run locks: its sha256 and mtime (what 'never modified' compares)."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# 1. Divergence ------------------------------------------------------------------------------


def test_a_diverging_run_stops_with_one_line_keeps_its_last_finite_checkpoint_and_is_done(tmp_path):
    out = tmp_path / "run"
    result = _interp("train", *DIVERGING, "--out", out)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0] == (
        f"error: {out} diverged at epoch 2: embed.W_E is nan "
        "(not saved; LATEST is its last finite checkpoint, step 1)"
    )
    done = read_done(out)
    assert done["diverged"] == {"step": 2, "tensor": "embed.W_E", "value": "nan", "checkpoint": 1}
    latest = load_checkpoint(out)  # LATEST: the last finite state, loadable without any flag
    assert latest.step == 1 and first_nonfinite(latest.state_dict) is None
    assert [r["step"] for r in read_metrics(out)] == [0, 1]  # the non-finite evaluation is not logged
    before = _tree(out)
    again = _interp("train", *DIVERGING, "--out", out)  # finished: not retrained, same one line
    assert again.returncode == 1 and again.stderr == result.stderr
    assert _tree(out) == before


def test_the_report_lists_diverged_runs_apart(tmp_path, capsys):
    grid = {
        "presets": ["mpsp-1l1h"],
        "task": TASK,
        "train": {"epochs": 6, "eval_every": 1, "checkpoint_every": 2},
        "axes": {"lr": [1e-3, 1e7]},
        "seeds": 1,
    }
    (tmp_path / "grid.json").write_text(json.dumps(grid))
    code, _, err = _cli(
        capsys,
        "sweep",
        "--grid",
        tmp_path / "grid.json",
        "--out",
        tmp_path / "s",
        "--jobs",
        "1",
        "--no-progress",
    )
    assert code == 0, err
    assert "diverged: " in err and "diverged at epoch 2" in err
    runs = pd.read_csv(tmp_path / "s" / "runs.csv")
    assert sorted(runs["status"]) == ["diverged", "finished"]
    assert runs.loc[runs["status"] == "diverged", "diverged tensor"].item() == "embed.W_E"
    rates = pd.read_csv(tmp_path / "s" / "rates.csv")
    assert set(zip(rates["lr"], rates["finished"], rates["diverged"])) == {(1e-3, 1, 0), (1e7, 0, 1)}
    page = (tmp_path / "s" / "report.html").read_text()
    assert "Diverged runs (1; not in the rates)" in page
    # The diverged configuration's runs are counted as diverged, not as unfinished.
    assert "1 (1 diverged)" in page and "(1 unfinished)" not in page


def _tiny_run(folder: Path, epochs: int = 4) -> Path:
    task = MPSPTask(**TASK)
    train(
        folder,
        build_model(preset_config("mpsp-1l1h", task), seed=0),
        task,
        TrainConfig(epochs=epochs, eval_every=2),
        progress=False,
    )
    return folder


def test_nonfinite_weights_with_a_valid_manifest_are_refused_unless_asked_for(tmp_path, capsys):
    run = _tiny_run(tmp_path / "run")
    good = load_checkpoint(run)
    broken = dict(good.state_dict)
    broken["blocks.0.attn.W_Q"] = (
        broken["blocks.0.attn.W_Q"].clone().index_fill_(0, torch.tensor([0]), float("inf"))
    )
    save_checkpoint(run, good.step + 1, broken, meta=good.meta)  # a valid manifest around inf weights
    with pytest.raises(CheckpointError, match=r"non-finite weights \('blocks.0.attn.W_Q' has inf\)"):
        load_checkpoint(run)
    assert first_nonfinite(load_checkpoint(run, allow_nonfinite=True).state_dict) == (
        "blocks.0.attn.W_Q",
        "inf",
    )
    code, _, err = _cli(capsys, "fingerprint", "--ckpt", run, "--out", tmp_path / "fp")
    assert code == 2 and "non-finite weights" in err and "--allow-nonfinite" in err
    subject = load_subject(run, allow_nonfinite=True)
    assert torch.isinf(subject.model.blocks[0].attn.W_Q).any()


# 5. Concurrent sweeps, and a sweep whose worker dies ----------------------------------------

SWEEP_GRID = {
    "presets": ["mpsp-1l1h"],
    "task": TASK,
    # Long enough (a few seconds a run) that a second sweep started beside the first finds runs
    # still to train, however fast the first one starts.
    "train": {"epochs": 480, "eval_every": 40, "checkpoint_every": 120},
    "axes": {"r": [0.5, 0.9]},
    "seeds": 2,
}


def _sweep_cmd(grid: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "interp",
        "sweep",
        "--grid",
        str(grid),
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def single_sweep(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("single")
    (folder / "grid.json").write_text(json.dumps(SWEEP_GRID))
    done = subprocess.run(
        _sweep_cmd(folder / "grid.json", folder / "s", "--jobs", "1", "--threads", "1"),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return folder / "s"


def _runs(sweep: Path) -> list[Path]:
    """The run folders of a sweep (from its sweep.json: no walk that races with the writers)."""
    return sorted(spec.out for spec in read_sweep(sweep)[0]) if (sweep / "sweep.json").exists() else []


def _same_results(a: Path, b: Path) -> None:
    """Two sweeps with the same runs: every run's metrics and final weights equal bit for bit."""
    runs_a, runs_b = _runs(a), _runs(b)
    assert [p.relative_to(a) for p in runs_a] == [p.relative_to(b) for p in runs_b] and len(runs_a) == 4
    for ra, rb in zip(runs_a, runs_b):
        assert read_metrics(ra) == read_metrics(rb)
        last = f"step_{SWEEP_GRID['train']['epochs']:06d}"
        assert (ra / "checkpoints" / last / "model.safetensors").read_bytes() == (
            rb / "checkpoints" / last / "model.safetensors"
        ).read_bytes()


def _reports_equal(a: Path, b: Path) -> None:
    rates_a, rates_b = (pd.read_csv(r / "rates.csv") for r in (a, b))
    pd.testing.assert_frame_equal(rates_a, rates_b)
    runs_a, runs_b = (pd.read_csv(r / "runs.csv") for r in (a, b))
    pd.testing.assert_frame_equal(
        runs_a.drop(columns="run", errors="ignore"), runs_b.drop(columns="run", errors="ignore")
    )


# Concurrency and kill tests (~40 s each) run in `make test-slow`, which CI also runs.
@pytest.mark.slow
def test_two_sweeps_on_one_folder_train_every_run_exactly_once_and_report_as_one(tmp_path, single_sweep):
    (tmp_path / "grid.json").write_text(json.dumps(SWEEP_GRID))
    cmd = _sweep_cmd(tmp_path / "grid.json", tmp_path / "s", "--jobs", "1", "--threads", "1", "--no-report")
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    runs = _runs(tmp_path / "s")
    # Exactly once: each run has one training session, and a process holding none of them took
    # the other's results rather than training them again.
    sessions = {run.name: read_sessions(run) for run in runs}
    assert all(len(s) == 1 for s in sessions.values()), sessions
    trainers = {s[0]["pid"] for s in sessions.values()}
    # Both trained some, or the one that trained none waited on the other's locks and took its
    # results (it says so) instead of training them again.
    idle = [out for p, out in zip(procs, outputs) if p.pid not in trainers]
    assert len(trainers) == 2 or (len(idle) == 1 and "trained by another process" in idle[0][1]), outputs
    assert all(is_done(run) for run in runs)
    _same_results(single_sweep, tmp_path / "s")
    assert _interp("report", tmp_path / "s", "--out", tmp_path / "r", "--no-progress").returncode == 0
    assert _interp("report", single_sweep, "--out", tmp_path / "r1", "--no-progress").returncode == 0
    _reports_equal(tmp_path / "r", tmp_path / "r1")


@pytest.mark.slow
def test_a_sweep_whose_worker_is_killed_finishes_on_rerun_without_retraining_finished_runs(
    tmp_path, single_sweep
):
    (tmp_path / "grid.json").write_text(json.dumps(SWEEP_GRID))
    out = tmp_path / "s"
    cmd = _sweep_cmd(tmp_path / "grid.json", out, "--jobs", "2", "--threads", "1", "--no-report")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim, deadline = None, time.time() + 300
    while victim is None and time.time() < deadline and proc.poll() is None:
        runs = _runs(out)
        if any(is_done(r) for r in runs):
            for run in runs:  # a run being trained now: its lock is held and names the worker's pid
                pid = (run / ".lock").read_text().strip() if (run / ".lock").exists() else ""
                if pid.isdigit() and int(pid) != proc.pid and is_locked(run) and not is_done(run):
                    os.kill(int(pid), signal.SIGKILL)
                    victim = run
                    break
        time.sleep(0.02)
    assert victim is not None, f"no worker to kill: {proc.poll()}"
    _, stderr = proc.communicate(timeout=300)
    runs = _runs(out)
    finished = {run: (run / "DONE").stat().st_mtime_ns for run in runs if is_done(run)}
    unfinished = [run for run in runs if not is_done(run)]
    assert finished and victim in unfinished, stderr  # the worker died mid-run; the sweep stopped
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    for run, mtime in finished.items():  # finished runs were not retrained
        assert (run / "DONE").stat().st_mtime_ns == mtime and len(read_sessions(run)) == 1
    assert len(read_sessions(victim)) == 2  # the killed run resumed from its checkpoint, once
    assert all(is_done(run) for run in runs)
    _same_results(single_sweep, out)


# 6. Read-only inputs ------------------------------------------------------------------------


def _cases() -> list[str]:
    return [
        name
        for name in REGISTRY
        if "transformer" in get_analysis(name).models and get_analysis(name).tasks in (None, ("mpsp",))
    ]


def test_analyses_and_report_on_a_read_only_run_write_only_under_out(tmp_path, capsys):
    require_root("the read-only run folder test")
    with tmpfs(tmp_path / "ro", "16m") as disk:
        sweep = disk / "sweep"
        grid = {"presets": ["mpsp-1l1h"], "task": TASK, "train": {"epochs": 4, "eval_every": 2}, "seeds": 1}
        (tmp_path / "grid.json").write_text(json.dumps(grid))
        code, _, err = _cli(
            capsys,
            "sweep",
            "--grid",
            tmp_path / "grid.json",
            "--out",
            sweep,
            "--jobs",
            "1",
            "--no-progress",
            "--no-report",
        )
        assert code == 0, err
        run = _runs(sweep)[0]
        remount(disk, "ro")
        before = _tree(disk)
        for name in _cases():
            code, _, err = _cli(
                capsys, name, "--ckpt", run, *size_args(name), "--out", tmp_path / "out" / name
            )
            assert code == 0, (name, err)
            assert (tmp_path / "out" / name / "result.json").is_file()
        code, _, err = _cli(capsys, "fingerprint", "--ckpt", run)  # no --out: refused, nothing tried
        assert code == 2 and "read-only" in err and "--out" in err
        code, _, err = _cli(
            capsys,
            "evolve",
            "--run",
            run,
            "--analysis",
            "fingerprint",
            "--out",
            tmp_path / "evo",
            "--no-progress",
        )
        assert code == 0, err
        code, _, err = _cli(capsys, "evolve", "--run", run, "--analysis", "fingerprint", "--no-progress")
        assert code == 2 and "read-only" in err  # no --out: refused, nothing tried
        code, _, err = _cli(
            capsys, "report", sweep, "--out", tmp_path / "report", "--evolution", "--no-progress"
        )
        assert code == 0, err
        assert (tmp_path / "report" / "report.html").is_file()
        code, _, err = _cli(capsys, "report", sweep, "--no-progress")
        assert code == 2 and "read-only" in err
        assert _tree(disk) == before  # not one byte or timestamp changed
        remount(disk, "rw")


# Its sibling above (a read-only run) stays in the default suite; this one is ~33 s: make test-slow.
@pytest.mark.slow
def test_a_run_folder_the_user_cannot_write_to_is_analysed_and_reported_from_out(tmp_path_factory):
    """Permissions, not a mount: the run's files are read-only to the user running the analysis
    (as root, the analysis runs as the unprivileged user nobody, since root ignores permissions).
    """
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="interp-ro-"))  # /tmp: readable by another user, unlike tmp_path
    opened: list[tuple[Path, int]] = []
    try:
        os.chmod(base, 0o755)
        sweep = base / "sweep"
        grid = {"presets": ["mpsp-1l1h"], "task": TASK, "train": {"epochs": 2, "eval_every": 1}, "seeds": 1}
        (base / "grid.json").write_text(json.dumps(grid))
        made = _interp("sweep", "--grid", base / "grid.json", "--out", sweep, "--jobs", "1", "--no-progress")
        assert made.returncode == 0, made.stderr
        run = _runs(sweep)[0]
        for path in [sweep, *sweep.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        out = base / "out"
        out.mkdir()
        prefix = []
        if os.geteuid() == 0:
            os.chown(out, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
            # nobody must reach the checkout and its .venv: a clone in `mktemp -d` (mode 0700,
            # as CI makes it) is closed to other users. Let them pass through (o+x, no listing)
            # for this test; the modes are put back in `finally`.
            code = Path(__file__).resolve().parents[2]  # the checkout, and the environment it runs in
            for folder in {p for top in (code, Path(sys.prefix)) for p in (top, *top.parents)}:
                mode = folder.stat().st_mode
                if not mode & 0o001:
                    opened.append((folder, mode))
                    folder.chmod(mode | 0o001)
        env = {
            **os.environ,
            "HOME": str(out),
            "PYTHONPATH": os.pathsep.join(sys.path),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        before = _tree(sweep)
        for args in (
            ["fingerprint", "--ckpt", run, "--out", out / "fp"],
            ["report", sweep, "--out", out / "report", "--no-progress"],
        ):
            done = subprocess.run(
                [*prefix, sys.executable, "-m", "interp", *map(str, args)],
                capture_output=True, text=True, timeout=300, env=env, cwd=out,
            )  # fmt: skip
            assert done.returncode == 0, (args, done.stderr)
        assert (out / "fp" / "result.json").is_file() and (out / "report" / "report.html").is_file()
        refused = subprocess.run(
            [*prefix, sys.executable, "-m", "interp", "fingerprint", "--ckpt", str(run)],
            capture_output=True, text=True, timeout=300, env=env, cwd=out,
        )  # fmt: skip
        assert refused.returncode == 2 and "read-only" in refused.stderr
        assert _tree(sweep) == before
    finally:
        for folder, mode in opened:
            folder.chmod(mode)
        for path in [base, *base.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(base)


# 7. Data that does not match ----------------------------------------------------------------


def test_an_analysis_of_data_whose_digest_differs_refuses_naming_both_unless_forced(tmp_path, capsys):
    run = _tiny_run(tmp_path / "run")
    stored = load_checkpoint(run).meta["fingerprints"]
    config = json.loads((run / "config.json").read_text())
    config["train"]["data_seed"] = 1  # the data rebuilt for the run now differ from what it trained on
    (run / "config.json").write_text(json.dumps(config))
    rebuilt = MPSPTask(**TASK).splits(1)
    code, _, err = _cli(capsys, "fingerprint", "--ckpt", run, "--out", tmp_path / "fp")
    assert code == 2, err
    first = sorted(stored)[0]
    assert stored[first] in err and rebuilt[first].digest() in err and f"split {first!r}" in err
    code, _, err = _cli(capsys, "fingerprint", "--ckpt", run, "--out", tmp_path / "fp", "--force-data")
    assert code == 0 and "note: split" in err and "forced" in err
    # The Python API: a subject handed another split refuses it the same way.
    config["train"]["data_seed"] = 0
    (run / "config.json").write_text(json.dumps(config))
    subject = load_subject(run)
    other = dataclasses.replace(subject, splits={**subject.splits, "adv": rebuilt["adv"]})
    with pytest.raises(CheckpointError, match=rebuilt["adv"].digest()):
        get_analysis("fingerprint").compute(other, get_analysis("fingerprint").params(split="adv"))
    forced = dataclasses.replace(other, force_data=True)
    with pytest.warns(Note, match="analysed anyway"):
        forced.split("adv")


# 8. Sizes -----------------------------------------------------------------------------------


def _limit_memory() -> None:  # 3 GB of address space: a real attempt at the task would fail here
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))


def test_a_task_too_large_for_memory_is_refused_up_front_with_the_estimate(tmp_path):
    out = tmp_path / "big"
    result = _interp(
        "train", "--preset", "mpsp-1l1h", "--n-train", "1000000000", "--epochs", "1", "--out", out,
        "--no-progress", preexec_fn=_limit_memory, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert line.startswith("error: this run needs about ") and "GB are available" in line
    assert "\n" not in line and "1000004096 examples" in line
    assert not out.exists()


def test_a_model_too_large_for_memory_is_refused_with_the_estimate():
    task = MPSPTask(**TASK)
    cfg = preset_config("mpsp-1l1h", task)
    model_gb = 10**12 * 4 * 4 / 1024**3  # weights, gradients and AdamW's two moments, float32
    with pytest.raises(ConfigError, match=rf"model {model_gb:.1f} GB.* but 8\.0 GB are available"):
        check_memory(task, cfg, n_params=10**12, batch_size=None, available=8 * 1024**3)
    check_memory(task, cfg, n_params=10_000, batch_size=None, available=8 * 1024**3)  # fits: no error
