"""Study B: the classic schedule's error in S after each halving, on a toy with a known answer.

Usage::

    python scripts/long_runs/study_b_classic_toy.py OUT.csv [--seeds 0-3]   # walk and record
    python scripts/long_runs/study_b_classic_toy.py --records OUT.csv       # the table only

Walks `analyses.studies.study_b.diagnostics.classic_toy` from the protocols' ``ln f = 10`` to
``1e-4`` for each seed (about a minute of one idle thread a seed), writes one row a halving to
OUT.csv, and prints, per halving, the largest deviation of S from the exact density of states
over the seeds. The committed record is ``results/study-b/classic-toy/errors.csv``; the history
page quotes its table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _seeds(text: str) -> list[int]:
    """``0-3`` or ``0,2``: the seeds to walk."""
    try:
        if "-" in text:
            low, high = (int(part) for part in text.split("-"))
            return list(range(low, high + 1))
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds {text!r}: give a range (0-3) or a list (0,2)") from None


def main(argv: list[str] | None = None) -> int:
    """Walk the seeds into OUT.csv (or read --records) and print the table; 2 on a bad command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?", help="the CSV to write (one row a halving)")
    parser.add_argument("--seeds", type=_seeds, default=[0, 1, 2, 3], help="seeds [default: 0-3]")
    parser.add_argument("--records", type=Path, default=None, help="only print the table of this CSV")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.records is None):
        parser.error("give either OUT.csv (walk) or --records CSV (print its table), not both")
    if args.records is not None and not args.records.is_file():
        parser.error(f"--records {args.records}: no such file (valid: a CSV this script wrote)")

    import pandas as pd

    from analyses.studies.study_b.diagnostics.classic_toy import errors_by_halving, table

    if args.records is None:
        import torch

        torch.set_num_threads(1)
        rows = [row for seed in args.seeds for row in errors_by_halving(seed)]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(args.out, index=False)
    print(table(pd.read_csv(args.records or args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
