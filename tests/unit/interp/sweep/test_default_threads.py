"""The torch threads a run gets when none are given (`interp.sweep.executors.default_threads`):
the user's OMP_NUM_THREADS when set, else the cores shared among the processes.
"""

from __future__ import annotations

import pytest
import torch

from interp.sweep import executors
from interp.sweep.executors import LocalExecutor, default_threads


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 4)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.parametrize("jobs, expected", [(1, 4), (2, 2), (3, 1), (8, 1)])
def test_without_the_variable_the_cores_are_shared_among_the_jobs(four_cores, jobs, expected):
    assert default_threads(jobs) == expected


@pytest.mark.parametrize("value, expected", [("1", 1), ("3", 3), (" 2 ", 2), ("0", 2), ("two", 2), ("", 2)])
def test_a_positive_omp_num_threads_wins_and_anything_else_is_ignored(
    four_cores, monkeypatch, value, expected
):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert default_threads(2) == expected


def test_a_run_in_this_process_gets_the_variables_threads(four_cores, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        (outcome,) = LocalExecutor(jobs=1).map(lambda _: torch.get_num_threads(), [0])
        assert outcome.value == 1
    finally:
        torch.set_num_threads(before)
