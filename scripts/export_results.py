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

import argparse
import json
from pathlib import Path

from interp.store import export_weights
from interp.sweep.specs import export_records


def main(argv: list[str] | None = None) -> None:
    """Export the sweep named on the command line, and the weights of the runs named after it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the sweep folder (SWEEP_DIR)")
    parser.add_argument("dest", type=Path, help="where the records go, e.g. results/study-a/headline")
    parser.add_argument(
        "runs", nargs="*", help="run folders (relative to SWEEP_DIR) whose weights to export too"
    )
    parser.add_argument("--cpu-ledger", type=Path, help="a CPU ledger (run -> CPU seconds) of the sweep")
    args = parser.parse_args(argv)
    if not (args.source / "sweep.json").is_file():
        parser.error(f"{args.source} is not a sweep folder (it has no sweep.json)")
    ledger: dict[str, float] = json.loads(args.cpu_ledger.read_text()) if args.cpu_ledger else {}
    print(f"{len(export_records(args.source, args.dest))} run records in {args.dest}")
    for run, seconds in ledger.items():
        recorded = (args.source / run / "compute.json").is_file()  # training wrote it: keep that
        if not run.startswith("_") and (args.dest / run).is_dir() and not recorded:
            record = {"cpu_seconds": round(seconds, 1), "how": "sampled per sweep worker process, every 30 s"}
            (args.dest / run / "compute.json").write_text(json.dumps(record, indent=1) + "\n")
    for run in args.runs:
        steps = export_weights(args.source / run, args.dest / run)
        print(f"{run}: weights of {len(steps)} checkpoints, steps {steps[0]:,} to {steps[-1]:,}")


if __name__ == "__main__":
    main()
