"""Executors: every item comes back as an `Outcome`, and a failing item never stops the others.

The functions mapped are stdlib ones (``math.sqrt``, ``os._exit``) so that submitit's worker
processes can unpickle them by reference without this test module on their path (local workers
get this process's import path, so they can import this module's own functions).
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from interp.errors import ConfigError, RunsInterrupted
from interp.sweep.executors import LocalExecutor, SubmititExecutor
from interp.sweep.outcome import Outcome

ITEMS = [4.0, 9.0, -1.0, 16.0]  # math.sqrt(-1.0) raises ValueError: math domain error


def _check_sqrt_outcomes(outcomes: list[Outcome]) -> None:
    assert sorted(o.item for o in outcomes) == sorted(ITEMS)  # each item exactly once
    by_item = {o.item: o for o in outcomes}
    assert {item: by_item[item].value for item in (4.0, 9.0, 16.0)} == {4.0: 2.0, 9.0: 3.0, 16.0: 4.0}
    assert all(by_item[item].ok for item in (4.0, 9.0, 16.0))
    failed = by_item[-1.0]
    assert not failed.ok and failed.value is None
    assert failed.error.startswith("ValueError: math domain error")


def test_local_executor_reports_the_failing_item_and_runs_the_rest():
    _check_sqrt_outcomes(list(LocalExecutor(jobs=2, threads=1).map(math.sqrt, ITEMS)))


def test_local_executor_in_process_when_one_job():
    _check_sqrt_outcomes(list(LocalExecutor(jobs=1, threads=1).map(math.sqrt, ITEMS)))


def test_submitit_local_runs_a_map_end_to_end(tmp_path):
    # Not importorskip: `make test` installs the cluster extra, so a missing submitit is a failure.
    import submitit  # noqa: F401

    # array_parallelism=2 < 4 items: the local executor is fed as slots free up.
    executor = SubmititExecutor(
        folder=tmp_path / "%j", cluster="local", threads=1, poll_s=0.5, array_parallelism=2
    )
    _check_sqrt_outcomes(list(executor.map(math.sqrt, ITEMS)))
    assert len(list(tmp_path.glob("*/*_submitted.pkl"))) == len(ITEMS)  # one task per item
    assert list(executor.map(math.sqrt, [])) == []


def test_submitit_local_task_that_dies_becomes_an_outcome(tmp_path):
    # os._exit kills the task's process before it writes a result: a failure outside fn,
    # as a Slurm kill or OOM would be. It must come back as an error outcome, not raise.
    executor = SubmititExecutor(folder=tmp_path / "%j", cluster="local", threads=1, poll_s=0.5)
    start = time.perf_counter()
    [outcome] = list(executor.map(os._exit, [3]))
    assert outcome.item == 3 and not outcome.ok
    assert "has not produced any output" in outcome.error
    assert time.perf_counter() - start < 20


def test_submitit_debug_runs_in_process(tmp_path):
    executor = SubmititExecutor(folder=tmp_path / "%j", cluster="debug", threads=1, poll_s=0.1)
    _check_sqrt_outcomes(list(executor.map(math.sqrt, ITEMS)))


def test_missing_submitit_is_a_config_error_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # makes `import submitit` fail
    executor = SubmititExecutor(folder=tmp_path, cluster="local")
    with pytest.raises(ConfigError, match=r"interp\[cluster\]"):
        list(executor.map(math.sqrt, ITEMS))


@pytest.mark.parametrize(
    "kwargs", [{"cluster": "kubernetes"}, {"timeout_min": 0}, {"cpus_per_task": 0}, {"mem_gb": 0}]
)
def test_bad_settings_are_config_errors(tmp_path, kwargs):
    with pytest.raises(ConfigError):
        SubmititExecutor(folder=tmp_path, **kwargs)


def _workers_of_this_process() -> list[int]:
    """Live `interp.sweep.worker` children of this process (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"interp.sweep.worker" in cmdline:
            found.append(int(entry.name))
    return found


def _sqrt_or_exit(x: float) -> float:
    if x < 0:
        os._exit(3)  # the worker process ends without a result, as a crash in C would
    return math.sqrt(x)


def test_local_executor_worker_that_dies_is_its_items_outcome_and_the_others_go_on():
    outcomes = list(LocalExecutor(jobs=2, threads=1).map(_sqrt_or_exit, ITEMS))
    assert sorted(o.item for o in outcomes) == sorted(ITEMS)
    by_item = {o.item: o for o in outcomes}
    assert {item: by_item[item].value for item in (4.0, 9.0, 16.0)} == {4.0: 2.0, 9.0: 3.0, 16.0: 4.0}
    assert re.fullmatch(r"its worker process \d+ exited with code 3 without a result", by_item[-1.0].error)
    assert _workers_of_this_process() == []  # none left idle once the map ends


def test_a_stop_signal_lets_running_items_end_starts_no_more_and_leaves_no_worker():
    outcomes = []
    with pytest.raises(RunsInterrupted) as info:
        for outcome in LocalExecutor(jobs=2, threads=1).map(time.sleep, [0.5] * 6):
            outcomes.append(outcome)
            if len(outcomes) == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # while both workers have an item
    assert info.value.signum == signal.SIGTERM and info.value.not_started == 4
    assert len(outcomes) == 2 and all(o.ok for o in outcomes)  # the running items ended
    assert _workers_of_this_process() == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back
