"""Carry study B's walks across machines: export each seed's resumable state, or restore it.

Usage::

    python scripts/long_runs/study_b_state.py export OUT DEST    # e.g. DEST = results/study-b/protocol-2-state
    python scripts/long_runs/study_b_state.py restore DEST OUT   # then rerun interp study-b measure OUT ...
    python scripts/long_runs/study_b_state.py restore DEST OUT --preset protocol-4 --seeds 0   # walk on
    python scripts/long_runs/study_b_state.py restore DEST OUT --preset protocol-6 --adamw-only  # walk anew

`export` is safe while `interp study-b measure OUT` runs, and replaces what DEST held; `restore`
fills only the seeds OUT has no seed_N folder of (`analyses.studies.study_b.state`). With
`--preset`, OUT is measured with that preset, which may differ from the exported settings only
by a larger walk budget and another production length: `interp study-b measure OUT --preset
NAME` then continues each walk and samples it anew. With `--adamw-only`, only each seed's AdamW
runs are restored: `measure OUT --preset NAME` walks again from the same AdamW models (for a
preset that changes the walk itself, e.g. protocol 6's force at the wall).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    """Export or restore; print what was carried; 0 on success, 2 on bad input."""
    sys.path.insert(0, str(ROOT))
    from analyses.studies.study_b.settings import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("export", "restore"))
    parser.add_argument("source", type=Path, help="export: the measured OUT; restore: the exported DEST")
    parser.add_argument("target", type=Path, help="export: DEST; restore: the OUT to resume in")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="restore only: continue the walks under this preset (a larger wlmd.max_steps or another "
        "wlmd.production_steps), or with --adamw-only walk anew under it",
    )
    parser.add_argument(
        "--seeds", help="restore only: these seeds (e.g. 0 or 0-2; default: every exported one)"
    )
    parser.add_argument(
        "--adamw-only",
        action="store_true",
        help="restore only, with --preset: the AdamW runs alone, for walks started again under the preset",
    )
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"{args.source} is not a folder")
    if args.action == "export" and (args.preset or args.seeds or args.adamw_only):
        parser.error(
            "--preset, --seeds and --adamw-only are for restore: an export carries every seed as measured"
        )
    if args.adamw_only and not args.preset:
        parser.error("--adamw-only needs --preset: the settings the new walks run with")
    from interp.cli.options import parse_seeds
    from interp.errors import InterpError

    try:  # the seed list is checked before the heavy imports (torch, via study_b)
        wanted = parse_seeds(args.seeds) if args.seeds else None
    except InterpError as err:
        parser.error(str(err))
    from analyses.studies.study_b.state import export_state, restore_state

    try:
        if args.action == "export":
            sizes = export_state(args.source, args.target)
            for seed, size in sizes.items():
                print(f"seed {seed}: {size / 1e6:.1f} MB -> {args.target / f'seed_{seed}'}")
            if not sizes:
                print(f"no walk in {args.source} yet: nothing exported")
        else:
            settings = PRESETS[args.preset] if args.preset else None
            seeds = restore_state(args.source, args.target, settings, wanted, walks=not args.adamw_only)
            print(f"restored seeds {seeds or 'none (each already has a walk there)'} into {args.target}")
    except InterpError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
