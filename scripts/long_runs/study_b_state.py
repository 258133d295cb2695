"""Carry study B's walks across machines: export each seed's resumable state, or restore it.

Usage::

    python scripts/long_runs/study_b_state.py export OUT DEST    # e.g. DEST = results/study-b/protocol-2-state
    python scripts/long_runs/study_b_state.py restore DEST OUT   # then rerun interp study-b measure OUT ...
    python scripts/long_runs/study_b_state.py restore DEST OUT --preset protocol-4 --seeds 0   # walk on

`export` is safe while `interp study-b measure OUT` runs, and replaces what DEST held; `restore`
fills only the seeds OUT has no seed_N folder of (`analyses.studies.study_b_state`). With
`--preset`, OUT is measured with that preset, which may differ from the exported settings only
by a larger walk budget and another production length: `interp study-b measure OUT --preset
NAME` then continues each walk and samples it anew.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    """Export or restore; print what was carried; 0 on success, 2 on bad input."""
    sys.path.insert(0, str(ROOT))
    from analyses.studies.study_b_settings import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("export", "restore"))
    parser.add_argument("source", type=Path, help="export: the measured OUT; restore: the exported DEST")
    parser.add_argument("target", type=Path, help="export: DEST; restore: the OUT to resume in")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="restore only: continue the walks under this preset (a larger wlmd.max_steps only)",
    )
    parser.add_argument(
        "--seeds", help="restore only: these seeds (e.g. 0 or 0-2; default: every exported one)"
    )
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"{args.source} is not a folder")
    if args.action == "export" and (args.preset or args.seeds):
        parser.error("--preset and --seeds are for restore: an export carries every seed as measured")
    from interp.cli.options import parse_seeds
    from interp.errors import InterpError

    try:  # the seed list is checked before the heavy imports (torch, via study_b)
        wanted = parse_seeds(args.seeds) if args.seeds else None
    except InterpError as err:
        parser.error(str(err))
    from analyses.studies.study_b_state import export_state, restore_state

    try:
        if args.action == "export":
            sizes = export_state(args.source, args.target)
            for seed, size in sizes.items():
                print(f"seed {seed}: {size / 1e6:.1f} MB -> {args.target / f'seed_{seed}'}")
            if not sizes:
                print(f"no walk in {args.source} yet: nothing exported")
        else:
            settings = PRESETS[args.preset] if args.preset else None
            seeds = restore_state(args.source, args.target, settings, wanted)
            print(f"restored seeds {seeds or 'none (each already has a walk there)'} into {args.target}")
    except InterpError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
