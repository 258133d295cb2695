"""Reading (a)'s rules (analyses.studies.study_c.llc_reading) on synthetic curves whose rise and
fall are known: each rule holds exactly when its difference exceeds twice the combined standard
error, an unusable estimate never counts, and the answer follows the preregistered counts.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from analyses.studies.study_c.llc_reading import (
    answer,
    headline,
    reading_a,
    reading_a_figure,
    reading_steps,
    seed_reading,
)

STEPS = [0, 10, 20, 50, 100, 200, 300, 400, 600, 800, 1000, 2000]
T_MEM, T_GEN = 50, 300


def _records() -> list[dict]:
    """Corrupted-train accuracy reaches 99% at step T_MEM, test accuracy at T_GEN."""
    return [
        {"step": s, "train/corrupted/acc": 1.0 if s >= T_MEM else 0.5, "test/acc": 1.0 if s >= T_GEN else 0.1}
        for s in STEPS
    ]


def _table(estimates: dict[int, float], se: float = 1.0, flags: dict[int, str] | None = None) -> pd.DataFrame:
    """An evolve llc table with two chains a checkpoint (the estimate and se repeat on each)."""
    flags = flags or {}
    return pd.DataFrame(
        [
            {
                "chain": c,
                "step": s,
                "estimate": estimates.get(s, 10.0),
                "se": se,
                "flags": flags.get(s, np.nan),
            }
            for s in STEPS
            for c in range(2)
        ]
    ).astype({"flags": object})


# LLC 10 at the start, 20 at T_MEM, a peak of 25 at 200, 12 from 2 T_GEN = 600 on.
CURVE = {0: 10.0, 10: 10.0, 20: 15.0, 50: 20.0, 100: 22.0, 200: 25.0, 300: 18.0, 400: 15.0, 600: 12.0}


def test_a_rise_and_a_fall_larger_than_twice_the_se_both_hold():
    row = seed_reading(_table(CURVE), _records())
    assert (row["t_mem_noisy"], row["t_gen"]) == (T_MEM, T_GEN)
    assert row["rise"] == pytest.approx(10.0) and row["rise 2 SE"] == pytest.approx(2 * np.sqrt(2))
    assert (row["peak step"], row["end step"], row["fall"]) == (200, 600, pytest.approx(13.0))
    assert row["rises"] and row["falls"] and row["flags"] == ""


@pytest.mark.parametrize("se, holds", [(3.0, True), (4.0, False)])
def test_the_rise_counts_only_beyond_twice_the_combined_se(se, holds):
    # rise 10 against 2 * sqrt(2) * se: 8.5 at se 3, 11.3 at se 4.
    assert seed_reading(_table(CURVE, se=se), _records())["rises"] is holds


@pytest.mark.parametrize("flag, counts", [("nan", False), ("diverged", False), ("negative,rhat", True)])
def test_a_nan_or_diverged_estimate_counts_as_neither(flag, counts):
    row = seed_reading(_table(CURVE, flags={50: flag, 200: flag}), _records())
    assert (row["rises"], row["falls"]) == (counts, counts)
    assert set(flag.split(",")) <= set(row["flags"].split(","))


def test_the_fall_compares_with_the_last_checkpoint_when_training_stops_before_2_t_gen():
    records = [r for r in _records() if r["step"] <= 400]
    table = _table(CURVE)
    row = seed_reading(table[table["step"] <= 400], records)
    assert (row["end step"], row["fall"]) == (400, pytest.approx(10.0))


def test_a_run_that_never_generalises_has_no_fall():
    records = [dict(r, **{"test/acc": 0.1}) for r in _records()]
    row = seed_reading(_table(CURVE), records)
    assert row["t_gen"] is None and row["rises"] and not row["falls"] and "fall" not in row


@pytest.mark.parametrize(
    "rises, falls, expected",
    [
        ([1, 1, 0], [1, 1, 0], "yes"),
        ([1, 1, 1], [1, 0, 0], "no"),
        ([0, 0, 1], [1, 1, 1], "no"),
        ([1, 1, 0], [0, 1, 1], "undecided"),
        # before the third seed: decided only when no third seed can change it
        ([1, 1], [1, 1], "yes"),
        ([1, 1], [0, 0], "no"),
        ([0, 0], [1, 1], "no"),
        ([1, 1], [1, 0], "incomplete"),
        ([1], [0], "incomplete"),
    ],
)
def test_the_answer_follows_the_preregistered_counts(rises, falls, expected):
    table = pd.DataFrame({"rises": np.array(rises, bool), "falls": np.array(falls, bool)})
    assert answer(table) == expected


def test_the_headline_says_the_answer_and_each_seed_or_that_nothing_is_known():
    assert "0 of 3" in headline(pd.DataFrame()) and "nothing about the answer is known" in headline(
        pd.DataFrame()
    )
    table = pd.DataFrame({"seed": [0, 1], "rises": [True, False], "falls": [False, False]})
    assert headline(table) == (
        "**no** (2 of 3 seeds read, enough to decide; seed 0: a rise, no fall; seed 1: no rise, no fall)."
    )
    assert headline(table.iloc[:1]) == "**incomplete** (1 of 3 seeds read; seed 0: a rise, no fall)."
    table = pd.DataFrame({"seed": [0, 1, 2], "rises": [True] * 3, "falls": [True, True, False]})
    assert headline(table).startswith("**yes** (3 of 3 seeds read; seed 0: a rise, a fall;")


def test_reading_steps_keeps_every_early_checkpoint_and_log_spaced_late_ones():
    steps = list(range(0, 20001, 10))
    chosen = reading_steps(steps)
    assert [s for s in chosen if s <= 1000] == list(range(0, 1001, 10))
    late = [s for s in chosen if s > 1000]
    assert late[-1] == 20000 and len(late) <= 30  # the nearest late checkpoint to 1,000 is 1,010
    assert all(b / a > 1.05 for a, b in zip(late, late[1:]))  # spaced by ratio, not evenly


def test_reading_a_and_its_figure_read_the_committed_layout(tmp_path):
    for seed in range(3):
        folder = tmp_path / f"seed_{seed}"
        (folder / "run").mkdir(parents=True)
        _table(CURVE).to_csv(folder / "llc.csv", index=False)
        (folder / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    table = reading_a(tmp_path)
    assert table["seed"].tolist() == [0, 1, 2] and answer(table) == "yes"
    fig = reading_a_figure(tmp_path)
    assert [t.name for t in fig.data if t.yaxis in (None, "y")] == [
        "seed 0",
        "seed 1",
        "seed 2",
    ]  # the LLC panel
    assert {s.x0 for s in fig.layout.shapes} == {T_MEM, T_GEN}
