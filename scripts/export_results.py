"""Copy a sweep's compact records (configs, metrics, summaries; no weights) into results/.

Usage::

    .venv/bin/python scripts/export_results.py SWEEP_DIR results/<study>/<name> [RUN ...]
        [--cpu-ledger LEDGER.json]

See `interp.sweep.specs.export_records`. Each RUN (a run folder below SWEEP_DIR, relative to
it) also gets a weights-only, log-spaced series of 16 checkpoints (`interp.store.export_weights`)
so it can be dissected from a fresh clone. A CPU ledger (run folder relative to SWEEP_DIR -> CPU
seconds, sampled per worker process while the sweep ran) gives a `compute.json` to each run
trained by an interp that did not write one. Rerun it as runs finish: records are replaced
in place.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from interp.store import export_weights
from interp.sweep.specs import export_records


def main() -> None:
    """Export the sweep named on the command line, and the weights of the runs named after it."""
    args = sys.argv[1:]
    ledger: dict[str, float] = {}
    if "--cpu-ledger" in args:
        at = args.index("--cpu-ledger")
        ledger = json.loads(Path(args[at + 1]).read_text())
        del args[at : at + 2]
    source, dest, *runs = args
    print(f"{len(export_records(source, dest))} run records in {dest}")
    for run, seconds in ledger.items():
        recorded = (Path(source) / run / "compute.json").is_file()  # training wrote it: keep that
        if not run.startswith("_") and (Path(dest) / run).is_dir() and not recorded:
            record = {"cpu_seconds": round(seconds, 1), "how": "sampled per sweep worker process, every 30 s"}
            (Path(dest) / run / "compute.json").write_text(json.dumps(record, indent=1) + "\n")
    for run in runs:
        steps = export_weights(Path(source) / run, Path(dest) / run)
        print(f"{run}: weights of {len(steps)} checkpoints, steps {steps[0]:,} to {steps[-1]:,}")


if __name__ == "__main__":
    main()
