"""scripts/long_runs/frozen_sweep.sh refuses a malformed chain at once, before any checkout or run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "long_runs" / "frozen_sweep.sh"


@pytest.mark.parametrize(
    "grids, sweeps, message",
    [
        (
            "study-a-crossed,study-a-map-1l1h",
            "a/crossed",
            "2 grids (study-a-crossed,study-a-map-1l1h) but 1 sweep",
        ),
        ("study-a-crossed,,study-a-map-1l1h", "a,b,c", "an empty name"),
        ("study-a-crossed", "", "1 grids (study-a-crossed) but 0 sweep folders"),
    ],
)
def test_a_malformed_chain_exits_2_with_one_line_and_creates_nothing(tmp_path, grids, sweeps, message):
    done = subprocess.run(
        ["bash", str(SCRIPT), grids, "HEAD", sweeps, str(tmp_path / "runs")], capture_output=True, text=True
    )
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
