"""Why does a study-B walker stay at the upper ln-loss wall? Measure it on a walk's saved state.

Usage::

    python scripts/long_runs/study_b_wall_check.py ENTROPY [--steps 2000] [--out FILE]
        [--wall-force kept|fresh] [--schedule walk|classic|both]

ENTROPY is a walk's entropy-phase folder (``seed_N/wlmd/entropy``, e.g. protocol 2's
``results/study-b/protocol-2-state/seed_0/wlmd/entropy``, in git history at commit a9d29e6); it is
only read. Printed: the bias force on the walker at its saved position with the grid's edges as the walk ran them (flat)
and with the outermost slope carried to the edge (linear); then where the walker goes in
`--steps` more steps with linear edges, under the walk's own ln f schedule and under the
classic one restarted at ln f = 1 (`analyses.studies.study_b.diagnostics.wall`), with the force a reflected
walker keeps (as every walk up to protocol 5 ran) or a fresh one (`--wall-force`). `--out`
writes all of it as JSON. One torch thread, like the walks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    """Measure the force and the two continuations; print them; 0 on success."""
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entropy", type=Path, help="a walk's entropy-phase folder (seed_N/wlmd/entropy)")
    parser.add_argument("--steps", type=int, default=2000, help="steps of each continuation [default: 2000]")
    parser.add_argument("--out", type=Path, default=None, help="write the measurements here (JSON)")
    parser.add_argument(
        "--wall-force",
        choices=("kept", "fresh"),
        default="kept",
        help="a reflected walker's force in the continuations: kept (as the walks ran) or fresh [default: kept]",
    )
    parser.add_argument(
        "--schedule",
        choices=("walk", "classic", "both"),
        default="both",
        help="the continuations' ln f: the walk's own, the classic one restarted, or both [default: both]",
    )
    args = parser.parse_args(argv)
    if not (args.entropy / "checkpoints").is_dir():
        parser.error(
            f"{args.entropy} has no checkpoints/: give a walk's entropy folder (seed_N/wlmd/entropy)"
        )
    if args.steps < 100:
        parser.error(f"--steps {args.steps} is too short: at least 100 (one record every 100 steps)")
    import torch

    from analyses.studies.study_b.diagnostics.wall import continue_walk, wall_force

    torch.set_num_threads(1)
    result = {"forces": {edges: wall_force(args.entropy, edges) for edges in ("flat", "linear")}}
    for edges, force in result["forces"].items():
        print(
            f"{edges} edges: walker at x = {force['x']:.4f} (edge {force['x_edge']:.4f}, outermost centre "
            f"{force['x_top_centre']:.4f}); bias force {force['force']:.4g}, along x {force['along_x']:.4g}; "
            f"the force it carries {force['kept_force']:.4g}, along x {force['kept_along_x']:.4g}; its next "
            f"drift moves x by {force['drift_dx']:+.4g} ({force['drift_dx_linear']:+.4g} to first order)"
        )
    result["continuations"] = []
    for schedule in ("walk", "classic") if args.schedule == "both" else (args.schedule,):
        run = continue_walk(
            args.entropy, args.steps, edges="linear", schedule=schedule, wall_force=args.wall_force
        )
        result["continuations"].append(run)
        low, high = run["x_range"]
        print(
            f"linear edges, {schedule} ln f, {args.wall_force} wall force: {args.steps} steps from step "
            f"{run['from_step']}: x in "
            f"[{low:.4f}, {high:.4f}], {run['bins']} bin(s) visited, {run['walls']} wall reflections"
        )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
