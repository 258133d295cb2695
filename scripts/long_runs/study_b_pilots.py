"""Study B's pilots (the shorter road's, or protocol 3's with --cover): the table and the decision.

Usage::

    python scripts/long_runs/study_b_pilots.py OUT [--steps 10000] [--export DEST]
    python scripts/long_runs/study_b_pilots.py --records DEST     # the table from committed records
    python scripts/long_runs/study_b_pilots.py OUT --production-check [--export DEST]
    python scripts/long_runs/study_b_pilots.py OUT --cover [--steps 20000] [--export DEST]
    python scripts/long_runs/study_b_pilots.py --records DEST --cover

``--cover`` runs (or reads) protocol 3's pilots instead of the shorter road's
(`analyses.studies.study_b.diagnostics.cover`): can a walk with linear edges and the classic schedule
cover the window's x-bins at all?

OUT holds the pilot AdamW models and each variant's walk (`analyses.studies.study_b.diagnostics.pilots`);
re-running the same line resumes. `--export DEST` copies the compact records (no weights), from
which `--records DEST` rebuilds the table on a fresh clone. One torch thread: the pilots time
the process's own CPU clock, and share the machine with study A.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _arguments(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parsed command line, checked (a bad one exits 2 with one line, before torch loads)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the pilots' run folder")
    parser.add_argument(
        "--steps", type=int, default=None, help="entropy steps a variant [default: 10000; 20000 with --cover]"
    )
    parser.add_argument("--cover", action="store_true", help="protocol 3's pilots: does the walk cover x?")
    parser.add_argument("--export", type=Path, default=None, help="copy the compact records here")
    parser.add_argument("--records", type=Path, default=None, help="only print the table of these records")
    parser.add_argument(
        "--production-check",
        action="store_true",
        help="run walkers-own-starts' production on its pilot walk and print the check",
    )
    args = parser.parse_args(argv)
    if args.production_check and args.out is None:
        parser.error("--production-check needs OUT, the pilots' run folder")
    if (args.out is None) == (args.records is None):
        parser.error("give OUT to run the pilots, or --records DEST to read committed ones")
    if args.cover and args.production_check:
        parser.error("--cover and --production-check are different pilots: give one")
    if args.steps is not None and args.steps < 100:
        parser.error(
            f"--steps {args.steps} is too short: at least 100 (ten records a walk, a hundred for random starts)"
        )
    if args.records is not None and not args.records.is_dir():
        parser.error(f"--records {args.records} is not a folder (an --export folder of the pilots)")
    return parser, args


def main(argv: list[str] | None = None) -> int:
    """Run or read the pilots; print the table and the decision; 0 on success."""
    sys.path.insert(0, str(ROOT))
    parser, args = _arguments(argv)
    import torch

    from analyses.studies.study_b.diagnostics.cover import (
        COVER_STEPS,
        COVER_VARIANTS,
        cover_table,
        decide_cover,
    )
    from analyses.studies.study_b.diagnostics.pilots import (
        PRODUCTION_FILE,
        VARIANTS,
        decide,
        export_pilots,
        pilot_table,
        production_check,
        run_pilots,
    )
    from interp.training.memory import keep_freed_memory

    if args.steps is None:
        args.steps = COVER_STEPS if args.cover else 10_000

    torch.set_num_threads(1)
    keep_freed_memory()
    if args.production_check:
        check = production_check(args.out)
        for sample in check["samples"]:
            print(
                ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in sample.items())
            )
        print(
            f"{len(check['samples'])} samples in the window {check['window']}; check passed: {check['passed']}"
        )
        if args.export is not None:
            dest = args.export / check["variant"]
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(args.out / check["variant"] / PRODUCTION_FILE, dest / PRODUCTION_FILE)
        return 0
    variants, table = (COVER_VARIANTS, cover_table) if args.cover else (VARIANTS, pilot_table)
    if args.records is not None:
        frame = table(args.records, variants)
        if frame.empty:
            parser.error(f"--records {args.records} holds no pilot records (VARIANT/pilot.json)")
    else:
        frame = run_pilots(args.out, args.steps, variants, table=table)
        if args.export is not None:
            export_pilots(args.out, args.export, variants)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.cover:
        adopted, why = decide_cover(frame)
        print("decision:", adopted or "no protocol 3 from these pilots", "-", why)
    elif {"protocol-2"} <= set(frame["variant"]):
        print("decision:", *decide(frame))
    return 0


if __name__ == "__main__":
    sys.exit(main())
