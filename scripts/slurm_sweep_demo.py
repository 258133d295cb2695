"""Map a small function over a Slurm job array with `SubmititExecutor` and check the outcomes.

Run by ``scripts/slurm_localhost.sh`` once its single-node Slurm is up. Items: square roots
that succeed, one that raises inside the function (``-1``), and one whose task dies without a
result (``-99`` calls ``os._exit``, as a Slurm kill or OOM would end it); each comes back as
an `Outcome`, none stops the others.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time

from interp.sweep.executors import SubmititExecutor


def work(x: float) -> dict:
    """One 'run': the square root of x, and where it ran."""
    if x == -99:
        os._exit(3)  # the task dies outside any Python exception handler
    return {
        "sqrt": math.sqrt(x),
        "job": os.environ.get("SLURM_JOB_ID"),
        "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
    }


def main() -> int:
    """Run the demo job array; return the exit code."""
    items = [0.0, 1.0, 4.0, 9.0, -1.0, -99.0]
    folder = os.environ.get("DEMO_FOLDER") or tempfile.mkdtemp(prefix="interp-slurm-demo-")
    executor = SubmititExecutor(
        folder=f"{folder}/%j",
        cluster="slurm",
        partition="debug",
        timeout_min=5,
        cpus_per_task=1,
        mem_gb=1,
        threads=1,
        poll_s=2,
    )
    start = time.perf_counter()
    outcomes = {}
    for outcome in executor.map(work, items):
        first = (outcome.error or "").strip().splitlines()[:2]
        print(
            f"{time.perf_counter() - start:6.1f}s  item={outcome.item:>6}  "
            + (f"value={outcome.value}" if outcome.ok else f"error={' | '.join(first)}"),
            flush=True,
        )
        outcomes[outcome.item] = outcome
    assert sorted(outcomes) == sorted(items), outcomes
    for x in (0.0, 1.0, 4.0, 9.0):
        assert outcomes[x].ok and outcomes[x].value["sqrt"] == math.sqrt(x), outcomes[x]
        assert outcomes[x].value["job"] and outcomes[x].value["task"] is not None, outcomes[x]
    assert outcomes[-1.0].error.startswith("ValueError: math domain error"), outcomes[-1.0]
    assert not outcomes[-99.0].ok and "without a result" in outcomes[-99.0].error, outcomes[-99.0]
    print(f"OK: {len(items)} items as one job array in {time.perf_counter() - start:.1f}s; logs in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
