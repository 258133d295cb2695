"""Slow: a run at the size users actually train (`make test-slow`).

The default suite trains tiny models only; this trains the `demo` grid's two-layer r = 0.9 run at
its real size (32 values, 16,384 examples, 400 full-batch epochs) and checks the whole life of a
run folder on it: the summary is the milestones of the logged metrics, every checkpoint loads
as an analysis subject whose data matches the stored digests, and a second call trains nothing.
"""

from __future__ import annotations

import time

import pytest

from analyses import load_subject
from analyses.grids import expand
from analyses.studies.grids import GRIDS
from analyses.training import train_spec
from interp.metrics import milestones
from interp.store import checkpoint_dir, list_checkpoints, read_done, read_metrics
from tasks import MPSPTask


@pytest.mark.slow
def test_a_demo_size_two_layer_run_end_to_end(tmp_path):
    spec = next(
        s for s in expand(GRIDS["demo"], tmp_path) if s.tags["preset"] == "mpsp-2l2h" and s.tags["r"] == 0.9
    )
    summary = train_spec(spec)
    records = read_metrics(spec.out)
    assert summary == read_done(spec.out) and summary["epochs"] == spec.train["epochs"] == records[-1]["step"]
    assert summary["milestones"] == milestones(records, MPSPTask.milestones)
    steps = list_checkpoints(spec.out)
    assert steps[0] == 0 and steps[-1] == spec.train["epochs"] and len(steps) >= 8
    for step in (steps[0], steps[len(steps) // 2], steps[-1]):
        assert load_subject(checkpoint_dir(spec.out, step)).step == step
    start = time.perf_counter()
    assert train_spec(spec) == summary  # DONE: nothing is retrained
    assert time.perf_counter() - start < 30
