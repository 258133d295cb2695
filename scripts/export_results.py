"""Copy a sweep's compact records (configs, metrics, summaries; no weights) into results/.

Usage: `.venv/bin/python scripts/export_results.py SWEEP_DIR results/<study>/<name>`; see
`interp.sweep.specs.export_records`. Rerun it as runs finish: records are replaced in place.
"""

from __future__ import annotations

import sys

from interp.sweep.specs import export_records


def main() -> None:
    """Export the sweep named on the command line."""
    source, dest = sys.argv[1:3]
    print(f"{len(export_records(source, dest))} run records in {dest}")


if __name__ == "__main__":
    main()
