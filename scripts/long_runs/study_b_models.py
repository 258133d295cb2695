"""Keep the models a study-B table is about (export), and measure their used ranks (ranks).

Usage::

    # recompute protocol 6's samples and injections from its committed state (minutes a seed)
    python scripts/long_runs/study_b_state.py restore results/study-b/protocol-6-state runs/p6
    interp study-b measure runs/p6 --seeds 0-2 --preset protocol-6 --runs-only
    python scripts/long_runs/study_b_models.py export runs/p6 results/study-b/protocol-6-models
    python scripts/long_runs/study_b_models.py ranks      # -> results/study-b/protocol-6/used_ranks.csv

`export` keeps each seed's injected sample and post-injection models, weights only
(`analyses.studies.study_b.kept_models`). `ranks` measures the used and raw effective ranks
(`analyses.studies.study_b.used_rank.used_rank_table`) of every protocol-6 model: each seed's
AdamW model (from the state), its sample and the six models after injection (from the kept
models), and writes them beside the protocol's records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / "results" / "study-b" / "protocol-6-state"
MODELS = ROOT / "results" / "study-b" / "protocol-6-models"
RANKS = ROOT / "results" / "study-b" / "protocol-6" / "used_ranks.csv"


def seed_models(seed: int, state: Path = STATE, models: Path = MODELS) -> dict[str, Path]:
    """``{label: run folder}`` of one seed's protocol-6 models: ``adamw``, ``wlmd`` (the injected
    sample), then ``<model> after <noise>`` for each kept injection.
    """
    found = {"adamw": state / f"seed_{seed}" / "adamw", "wlmd": models / f"seed_{seed}" / "wlmd-sample"}
    for run in sorted((models / f"seed_{seed}").glob("inject-*")):
        _, model, noise = run.name.split("-")
        found[f"{model} after {noise}"] = run
    return found


def main(argv: list[str] | None = None) -> int:
    """Export or measure; print what was written."""
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("export", "ranks"))
    parser.add_argument("out", nargs="?", type=Path, help="export: the measured folder")
    parser.add_argument("dest", nargs="?", type=Path, default=MODELS, help="export: where the models go")
    parser.add_argument("--seeds", default="0-2", help="seeds, e.g. 0-2 or 0,2")
    args = parser.parse_args(argv)
    from interp.cli.options import parse_seeds

    seeds = parse_seeds(args.seeds)
    if args.action == "export":
        if args.out is None or not args.out.is_dir():
            parser.error("export needs the measured folder OUT")
        from analyses.studies.study_b.kept_models import export_models

        print(f"{len(export_models(args.out, args.dest, seeds))} run folders in {args.dest}")
        return 0
    import pandas as pd
    import torch

    from analyses.studies.study_b.used_rank import used_rank_table

    torch.set_num_threads(1)
    frames = [used_rank_table(seed_models(seed)).assign(seed=seed) for seed in seeds]
    table = pd.concat(frames, ignore_index=True)
    table[["seed", *table.columns[:-1]]].to_csv(RANKS, index=False)
    print(f"{len(table)} rows in {RANKS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
