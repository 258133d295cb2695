"""Stopping a sweep stops it, for real: signals to a running `interp sweep` and kills of its processes.

Each test starts a sweep of two long tiny runs in a subprocess (two workers), waits until both
runs have made progress, then signals or kills something and checks, within a bounded time,
that no worker process remains (the sweep's descendants, and any process started for it), that
every run has a checkpoint and its metrics stopped growing, and that running the sweep again
resumes every run bit-identically to an uninterrupted sweep of the same grid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interp.cli import main
from interp.store.checkpoint import load_checkpoint
from interp.store.run_folder import is_done, read_metrics, read_sessions
from interp.sweep.specs import read_sweep

EPOCHS = 300
GRID = {
    "presets": ["mpsp-1l1h"],
    "task": {"vocab": 12, "n": 4, "n_train": 128, "n_val": 32, "n_adv": 32},
    "train": {
        "epochs": EPOCHS,
        "eval_every": 10,
        "eval_log_points": 0,
        "checkpoint_every": 50,
        "checkpoint_log_points": 0,
    },
    "axes": {"r": [0.5, 0.9]},
    "seeds": 1,
}
FINAL = f"step_{EPOCHS:06d}"


def _cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _sweep_args(folder: Path, *extra: str) -> list[str]:
    return [
        "sweep", "--grid", str(folder / "grid.json"), "--out", str(folder / "s"),
        "--threads", "1", "--no-progress", "--no-report", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The grid trained without interruption (two workers, as the sweeps stopped below)."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / "grid.json").write_text(json.dumps(GRID))
    with pytest.raises(SystemExit) as info:
        main([*_sweep_args(folder), "--jobs", "2"])
    assert info.value.code == 0
    return folder / "s"


def _runs(sweep: Path) -> list[Path]:
    return sorted(spec.out for spec in read_sweep(sweep)[0]) if (sweep / "sweep.json").exists() else []


def _start(folder: Path, *extra: str, ignore_hup: bool = False) -> subprocess.Popen:
    """`interp sweep` with two workers, in a session of its own (signals reach only what we send)."""
    (folder / "grid.json").write_text(json.dumps(GRID))

    def as_from_a_terminal() -> None:
        # Stop signals at their defaults, as a terminal starts a command, whatever this test
        # process inherited (pytest under nohup or in a background job ignores SIGHUP or SIGINT,
        # and the sweep rightly keeps an ignored signal ignored); nohup ignores SIGHUP again.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        if ignore_hup:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "interp", *_sweep_args(folder, "--jobs", "2", *extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )  # fmt: skip


def _lock_pid(run: Path) -> int | None:
    """The pid of the worker training `run`, from its lock (None before the lock is taken)."""
    try:
        return int((run / ".lock").read_text())
    except (OSError, ValueError):
        return None


def _wait_for_progress(proc: subprocess.Popen, sweep: Path, records: int = 2) -> list[Path]:
    """Wait until every run of the sweep has logged `records` evaluations (and none has finished).

    Workers start seconds apart on a loaded machine, long enough for a tiny run to finish before
    the other has begun. So a run that gets there first waits, its worker stopped (SIGSTOP), until
    the other catches up; SIGCONT lets it go on. Stopping a process changes no result.
    """
    deadline, stopped = time.time() + 600, set()
    try:
        while time.time() < deadline and proc.poll() is None:
            runs = _runs(sweep)
            ahead = [r for r in runs if (r / "metrics.jsonl").exists() and len(read_metrics(r)) >= records]
            if len(runs) == 2 and len(ahead) == 2:
                assert not any(is_done(r) for r in runs), "a run finished before the test could stop it"
                return runs
            for run in ahead:
                if (pid := _lock_pid(run)) is not None and pid not in stopped:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                        stopped.add(pid)
            time.sleep(0.02)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    proc.kill()
    raise AssertionError(f"the runs made no progress: {proc.communicate()}")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (its children, theirs, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _started_for(sweep: Path, pid: int) -> set[int]:
    """Live processes whose command line names the sweep folder or the sweep's pid as supervisor."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        named = any(str(sweep) in arg for arg in cmdline)
        worker = "interp.sweep.worker" in cmdline and cmdline[-2:] == [str(pid), ""]
        if (named or worker) and _alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def _assert_no_worker_left(sweep: Path, pid: int, workers: set[int], within_s: float) -> None:
    deadline = time.time() + within_s
    while time.time() < deadline:
        left = {p for p in workers if _alive(p)} | _started_for(sweep, pid)
        if not left:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes of the sweep still alive after {within_s} s: {sorted(left)}")


def _assert_stopped_with_checkpoints(runs: list[Path], *, saved_on_stop: bool = True) -> None:
    """Every run has a loadable checkpoint (one saved when it stopped: past step 0), and its
    metrics no longer grow.
    """
    sizes = {run: (run / "metrics.jsonl").stat().st_size for run in runs}
    for run in runs:
        assert load_checkpoint(run).step >= int(saved_on_stop) and not is_done(run)
    time.sleep(1.5)
    assert {run: (run / "metrics.jsonl").stat().st_size for run in runs} == sizes


def _rerun(capsys, folder: Path) -> None:
    """The same sweep again (two workers)."""
    code, _, err = _cli(capsys, *_sweep_args(folder, "--jobs", "2"))
    assert code == 0, err


def _assert_same_as(sweep: Path, reference: Path) -> None:
    """Every run of `sweep` finished bit for bit as in the uninterrupted reference."""
    runs, expected = _runs(sweep), _runs(reference)
    assert [r.relative_to(sweep) for r in runs] == [r.relative_to(reference) for r in expected]
    for run, ref in zip(runs, expected):
        assert is_done(run) and read_metrics(run) == read_metrics(ref)
        weights = Path("checkpoints") / FINAL / "model.safetensors"
        assert (run / weights).read_bytes() == (ref / weights).read_bytes()


def _assert_resumes_identically(capsys, folder: Path, reference: Path) -> None:
    """The same sweep again resumes every run from its checkpoint and ends as the reference."""
    _rerun(capsys, folder)
    _assert_same_as(folder / "s", reference)
    assert all(len(read_sessions(run)) == 2 for run in _runs(folder / "s"))  # resumed, not restarted


def _stop_by_signal(tmp_path, capsys, reference, signum: int, *extra: str) -> None:
    proc = _start(tmp_path, *extra)
    runs = _wait_for_progress(proc, tmp_path / "s")
    workers = _descendants(proc.pid)
    assert workers, "the sweep has no worker processes"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"interrupted: stopped by {signal.Signals(signum).name}: 2 running runs saved")
    _assert_no_worker_left(tmp_path / "s", proc.pid, workers, within_s=1)  # gone before the sweep
    _assert_stopped_with_checkpoints(runs)
    _assert_resumes_identically(capsys, tmp_path, reference)


# Over the default suite's budget on 2 cores (~20-35 s): `make test-slow`, which CI also runs.
@pytest.mark.slow
def test_sigterm_stops_every_worker_with_a_checkpoint_and_the_rerun_resumes_bit_identically(
    tmp_path, capsys, reference
):
    _stop_by_signal(tmp_path, capsys, reference, signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_stop_the_sweep_the_same_way(tmp_path, capsys, reference, signum):
    _stop_by_signal(tmp_path, capsys, reference, signum)


@pytest.mark.slow
def test_sigterm_stops_a_submitit_local_sweep_the_same_way(tmp_path, capsys, reference):
    proc = _start(tmp_path, "--executor", "submitit-local")
    runs = _wait_for_progress(proc, tmp_path / "s")
    workers = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted: stopped by SIGTERM: 2 running runs")
    _assert_no_worker_left(tmp_path / "s", proc.pid, workers, within_s=5)
    _assert_stopped_with_checkpoints(runs)
    _assert_resumes_identically(capsys, tmp_path, reference)


def test_a_killed_worker_is_one_line_the_other_run_finishes_and_the_rerun_resumes_it(
    tmp_path, capsys, reference
):
    proc = _start(tmp_path)
    runs = _wait_for_progress(proc, tmp_path / "s")
    workers = _descendants(proc.pid)
    victim = runs[0]
    pid = _lock_pid(victim)  # the lock names the worker training the run
    assert pid in workers
    os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"error: {victim}: its worker process {pid} was killed by SIGKILL")
    assert "the other runs went on" in line and "Traceback" not in stderr
    assert is_done(runs[1]) and not is_done(victim)  # the other run finished
    _assert_no_worker_left(tmp_path / "s", proc.pid, workers, within_s=1)
    _assert_stopped_with_checkpoints([victim], saved_on_stop=False)  # killed: its last scheduled one
    _rerun(capsys, tmp_path)
    assert len(read_sessions(victim)) == 2 and len(read_sessions(runs[1])) == 1  # only the victim resumed
    _assert_same_as(tmp_path / "s", reference)


@pytest.mark.slow
def test_sigkill_of_the_sweep_stops_its_workers_within_seconds(tmp_path, capsys, reference):
    proc = _start(tmp_path)
    runs = _wait_for_progress(proc, tmp_path / "s")
    workers = _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    _assert_no_worker_left(tmp_path / "s", proc.pid, workers, within_s=60)
    _assert_stopped_with_checkpoints(runs)
    _assert_resumes_identically(capsys, tmp_path, reference)


@pytest.mark.slow
def test_sighup_ignored_from_the_start_nohup_leaves_the_sweep_running(tmp_path, capsys, reference):
    proc = _start(tmp_path, ignore_hup=True)
    runs = _wait_for_progress(proc, tmp_path / "s")
    for pid in _descendants(proc.pid):  # a closing terminal hangs up the whole process group
        os.kill(pid, signal.SIGHUP)
    proc.send_signal(signal.SIGHUP)
    before = {run: len(read_metrics(run)) for run in runs}
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr
    assert all(is_done(run) and len(read_metrics(run)) > before[run] for run in runs)
    assert all(len(read_sessions(run)) == 1 for run in runs)  # never stopped
    _assert_same_as(tmp_path / "s", reference)
