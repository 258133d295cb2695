"""Issue 50's reading (b) rule (analyses/studies/study_a/llc_reading.py) on LLC curves built
here with a known peak, and on the committed records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyses.studies.study_a.llc_reading import NEAR, curve_reading, reading_b

ROOT = Path(__file__).resolve().parents[4]
STEPS = [0, 1, 2, 5, 10, 20, 50, 100, 150, 200, 300, 500, 800, 1000, 1500]


def _curve(peak_at: int) -> pd.DataFrame:
    """An LLC curve rising to a peak at checkpoint position `peak_at`, then falling (two chains a step)."""
    values = [10.0 + 5 * min(i, 2 * peak_at - i) for i in range(len(STEPS))]
    return pd.DataFrame(
        [{"chain": c, "step": s, "estimate": v, "se": 0.1} for s, v in zip(STEPS, values) for c in (0, 1)]
    )


def test_a_peak_within_two_checkpoints_of_the_onset_meets_it():
    table = _curve(peak_at=8)  # the peak at epoch 150
    rows = {r["rule"]: r for r in curve_reading(table, onset=110)}  # nearest checkpoint: 100, position 7
    assert rows["llc"]["onset checkpoint"] == 100 and 150 in rows["llc"]["boundaries"]
    assert rows["llc"]["nearest"] <= NEAR and rows["llc"]["meets"]
    far = {r["rule"]: r for r in curve_reading(table, onset=1)}  # position 1: 7 checkpoints away
    assert not far["llc"]["meets"] and far["llc"]["nearest"] > NEAR


def test_a_run_without_an_onset_meets_nothing():
    assert not any(r["meets"] for r in curve_reading(_curve(peak_at=8), onset=None))


def test_the_committed_records_read_with_every_curve_and_rule():
    frame = reading_b(ROOT / "results" / "llc" / "reading-b", ROOT / "results" / "study-a" / "series")
    two = frame[frame["series"] == "mpsp-2l2h-r0.9"]
    assert set(two["curve"]) == {"whole", "L0H0", "L0H1", "L1H0", "L1H1"} and set(two["rule"]) == {
        "llc",
        "changepoint",
    }
    assert two.iloc[0][["curve", "rule"]].tolist() == ["whole", "llc"]  # the primary reading first
    assert np.all(two["onset"] == two["onset"].iloc[0])
