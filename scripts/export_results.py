"""Copy a sweep's compact records (configs, metrics, summaries; no weights) into results/.

Usage: `.venv/bin/python scripts/export_results.py SWEEP_DIR results/<study>/<name> [RUN ...]`;
see `interp.sweep.specs.export_records`. Each RUN (a run folder below SWEEP_DIR, relative to
it) also gets a weights-only, log-spaced series of 16 checkpoints (`interp.store.export_weights`)
so it can be dissected from a fresh clone. Rerun it as runs finish: records are replaced in place.
"""

from __future__ import annotations

import sys
from pathlib import Path

from interp.store import export_weights
from interp.sweep.specs import export_records


def main() -> None:
    """Export the sweep named on the command line, and the weights of the runs named after it."""
    source, dest, *runs = sys.argv[1:]
    print(f"{len(export_records(source, dest))} run records in {dest}")
    for run in runs:
        steps = export_weights(Path(source) / run, Path(dest) / run)
        print(f"{run}: weights of {len(steps)} checkpoints, steps {steps[0]:,} to {steps[-1]:,}")


if __name__ == "__main__":
    main()
