"""Study A's mechanism test on finished runs: write its record for docs/study_a.md.

Usage::

    python scripts/long_runs/mechanism.py MAP_DIR MAX_DIR [OUT] [--vocab V] [--jobs N]

MAP_DIR is the map's sweep folder (`--grid study-a-map`; its `mpsp-2l2h` r = 0.9 runs at V*, the
positional shortcut), MAX_DIR the sweep folder of `--grid study-a-mechanism-max` (the max
shortcut at V*). Both must hold the runs' checkpoints (they are read, never written). V is
`analyses.studies.study_a.grids.V_STAR` unless `--vocab` names it. OUT defaults to
`results/study-a/mechanism`, which the docs page draws from. Only finished runs are tested;
unfinished ones are listed in the record. The probe costs a few seconds a checkpoint (35
checkpoints a run), so `--jobs` runs that many runs at once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    """Find the runs of both sides, probe them, write the record; 0 on success."""
    sys.path.insert(0, str(ROOT))
    from analyses.studies.study_a.grids import V_STAR
    from analyses.studies.study_a.mechanism import Params, mechanism
    from analyses.studies.study_a.mechanism_io import find_runs, write_record

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("map_dir", type=Path, help="the map's sweep folder (positional shortcut)")
    parser.add_argument("max_dir", type=Path, help="the study-a-mechanism-max sweep folder")
    parser.add_argument("out", type=Path, nargs="?", default=ROOT / "results" / "study-a" / "mechanism")
    parser.add_argument("--vocab", type=int, default=V_STAR, help="V* [default: grids.V_STAR]")
    parser.add_argument("--jobs", type=int, default=1, help="runs probed at once")
    args = parser.parse_args(argv)
    if args.vocab is None:
        parser.error("V* is not set: pass --vocab V or set V_STAR in analyses/studies/grids.py")
    runs, unfinished = [], []
    for folder, shortcut in ((args.map_dir, "first"), (args.max_dir, "max")):
        done, pending = find_runs(folder, shortcut, args.vocab)
        if not done:
            parser.error(
                f"no finished mpsp-2l2h r = 0.9 run with shortcut {shortcut} at vocab {args.vocab} in {folder}"
            )
        runs += done
        unfinished += [f"{shortcut}, vocab {args.vocab}, {p.name}" for p in pending]
    result = mechanism(runs, Params(), jobs=args.jobs, progress=True)
    write_record(result, args.out, {"vocab": args.vocab, "unfinished_runs_left_out": unfinished})
    print(result.summary().to_string(index=False))
    print(f"verdict: {result.verdict()}; record in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
