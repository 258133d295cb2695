"""The classic schedule's toy measurement (analyses/studies/study_b/diagnostics/classic_toy.py)
and its script: one row a halving, in order, and a clear error for a bad command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analyses.studies.study_b.diagnostics.classic_toy import errors_by_halving, table

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "scripts" / "long_runs" / "study_b_classic_toy.py"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_one_row_a_halving_down_to_the_final_ln_f():
    rows = errors_by_halving(0, ln_f0=0.1, dt=0.1, final_ln_f=0.02)  # three halvings: 0.05, 0.025, 0.0125
    assert [row["halvings"] for row in rows] == [1, 2, 3]
    assert [row["ln_f"] for row in rows] == pytest.approx([0.05, 0.025, 0.0125])
    assert [row["finished"] for row in rows] == [False, False, True]
    assert all(0 < row["max_deviation"] < 5 for row in rows)  # a walk that follows its S, not a diverged one
    steps = [row["steps"] for row in rows]
    assert steps == sorted(steps) and all(step % 100 == 0 for step in steps)


def test_a_walk_out_of_steps_says_it_did_not_finish():
    rows = errors_by_halving(0, ln_f0=0.1, dt=0.1, final_ln_f=1e-9, max_steps=600)
    assert rows[-1]["steps"] == 600 and not rows[-1]["finished"]  # no halving yet: the state at 600


def test_the_table_spans_the_seeds_per_halving():
    frame = pd.DataFrame(
        [
            {"seed": s, "halvings": h, "ln_f": 10 / 2**h, "steps": 100 * h + s, "max_deviation": d}
            for s, devs in ((0, (3.0, 1.0)), (1, (5.0, 2.0)))
            for h, d in zip((1, 2), devs)
        ]
    )
    lines = table(frame).splitlines()
    assert lines[2:] == ["| 1 | 5 | 100-101 | 3.00-5.00 |", "| 2 | 2.5 | 200-201 | 1.00-2.00 |"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--records", "no-such.csv"], "--records no-such.csv: no such file"),
        (["out.csv", "--seeds", "a-b"], "seeds 'a-b': give a range (0-3) or a list (0,2)"),
        ([], "give either OUT.csv (walk) or --records CSV"),
    ],
)
def test_a_bad_command_line_exits_2_with_one_line(argv, message, tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
