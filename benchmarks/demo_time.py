"""Estimate `make demo`'s wall time on 2 cores from the committed records (target: 10 minutes).

Run: `PYTHONPATH=$PWD .venv/bin/python benchmarks/demo_time.py [--epochs N]`.

The demo trains four runs on two workers, one seed a cell (grid ``demo``); each worker gets one
two-layer and one one-layer run, so its wall time is about ``(c_2 + c_1) x epochs + fixed``,
where ``c`` is a model's CPU seconds an epoch on one thread with the other core busy and
``fixed`` is the rest (start-up, every checkpoint's circuit evolution, the report).

* ``c_2`` and ``c_1`` on AVX-512 machines: medians (and the slowest) of ``compute.json``'s CPU
  seconds over epochs of the committed runs trained the way the demo trains (32 values, no
  circuit measures at evaluations, two runs at a time): ``results/study-a/map`` (two layers)
  and ``results/study-a/map-1l1h`` (one layer).
* On AVX2 machines no run is committed: a two-layer demo run used 0.75 CPU s an epoch there
  (its ``compute.json``, issue 49), and the one-layer cost is scaled by the same ratio.
* ``fixed`` from the two timed 1,000-epoch demos: 407 s on AVX-512 (`benchmarks/README.md`)
  and 1,005 s on AVX2 (issue 49), less their training part.

Printed per kind of machine: the costs, the fixed part, the estimate at the demo's epochs (and
with the slowest recorded two-layer epoch), and its ratio to the 600 s target. An estimate,
not a measurement: time the demo itself on quiet cores (`benchmarks/README.md`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 600.0
AVX2_TWO_LAYER = 0.75  # CPU s an epoch of a demo two-layer run on an AVX2 machine (issue 49)
TIMED = {"AVX-512": (1000, 407.0), "AVX2": (1000, 1005.0)}  # (demo epochs, wall s) measured


def epoch_costs(folder: Path, vocab: int = 32) -> list[float]:
    """CPU seconds an epoch of every finished run at `vocab` below `folder` (its compute.json)."""
    costs = []
    for compute in sorted(folder.rglob("compute.json")):
        run = compute.parent
        config = json.loads((run / "config.json").read_text())
        if (run / "DONE").is_file() and config["task"]["vocab"] == vocab:
            costs.append(json.loads(compute.read_text())["cpu_seconds"] / config["train"]["epochs"])
    return costs


def main() -> None:
    """Print the per-epoch costs, the fixed parts and the estimate for each kind of machine."""
    from analyses.studies.grids import GRIDS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=GRIDS["demo"].train["epochs"], help="Demo epochs.")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "study-a")
    args = parser.parse_args()
    two, one = epoch_costs(args.results / "map"), epoch_costs(args.results / "map-1l1h")
    c2, c1, slowest = statistics.median(two), statistics.median(one), max(two) / statistics.median(two)
    print(f"records: {len(two)} two-layer runs (map), {len(one)} one-layer runs (map-1l1h), 32 values")
    factor = AVX2_TWO_LAYER / c2
    for kind, scale in (("AVX-512", 1.0), ("AVX2", factor)):
        a2, a1 = c2 * scale, c1 * scale
        epochs, wall = TIMED[kind]
        fixed = wall - (a2 + a1) * epochs
        estimate = (a2 + a1) * args.epochs + fixed
        worst = (a2 * slowest + a1) * args.epochs + fixed
        print(
            f"{kind}: c_2 {a2:.3f}, c_1 {a1:.3f} CPU s an epoch; fixed part {fixed:.0f} s "
            f"(from {wall:.0f} s at {epochs:,} epochs); {args.epochs:,} epochs: {estimate:.0f} s "
            f"({estimate / TARGET_S:.2f}x the 600 s target), {worst:.0f} s at the slowest recorded "
            f"two-layer epoch ({worst / TARGET_S:.2f}x)"
        )


if __name__ == "__main__":
    main()
