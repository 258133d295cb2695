"""Copy a sweep's committed finished records back into its run folder, so the sweep skips them.

Usage::

    .venv/bin/python scripts/long_runs/take_records.py results/<study>/<name> RUNS_DIR/<study>/<name>

See `interp.sweep.specs.take_finished_records`; `frozen_sweep.sh` calls it for each sweep it
starts, so a machine that lost its run folders does not retrain what is already committed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from interp.sweep.specs import take_finished_records


def main(argv: list[str]) -> None:
    """Take the finished records of argv[0] into argv[1]; print how many (nothing if none)."""
    if len(argv) != 2:
        sys.exit(f"usage: {Path(__file__).name} RECORDS SWEEP_DIR")
    records, sweep_dir = (Path(arg) for arg in argv)
    taken = take_finished_records(records, sweep_dir) if records.is_dir() else []
    if taken:
        print(
            f"{sweep_dir}: {len(taken)} finished runs taken from their records in {records} (not retrained)"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
