"""scripts/gpu/study_a.sh, the GPU path of study A's confirmatory grid, in its CPU dry run.

The script is what a GPU session runs once; here the same commands run at tiny scale on the
CPU, so a broken option, folder layout or report step fails in `make test`, not on the GPU.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from interp.store import read_done
from interp.sweep.specs import read_sweep

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "study_a.sh"


def test_the_dry_run_trains_four_vectorised_groups_and_reports(tmp_path):
    out = tmp_path / "grid"
    env = {**os.environ, "PYTHON": sys.executable, "EPOCHS": "4"}
    result = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--dry-run"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trained 4 groups" in result.stdout
    for preset in ("mpsp-2l2h", "mpsp-1l1h"):
        for r in ("0.9", "0.5"):
            specs, _ = read_sweep(out / preset / f"r={r}")
            assert [s.tags["seed"] for s in specs] == [0, 1]
            assert {s.tags["preset"] for s in specs} == {preset} and {s.tags["r"] for s in specs} == {
                float(r)
            }
            for spec in specs:
                done = read_done(spec.out)
                assert done["epochs"] == 4 and set(done["milestones"]) == {
                    "generalized",
                    "rule",
                    "memorized",
                    "generalized-99",
                    "rule-99",
                }
    # One report over the four groups: every configuration a row of its rates table.
    with open(out / "rates.csv") as table:
        rows = list(csv.DictReader(table))
    cells = {(row["preset"], float(row["r"])) for row in rows if row["milestone"] == "rule"}
    assert cells == {(p, r) for p in ("mpsp-2l2h", "mpsp-1l1h") for r in (0.9, 0.5)}
    assert all(row["runs"] == "2" and row["finished"] == "2" for row in rows)
    assert (out / "report.html").is_file()
