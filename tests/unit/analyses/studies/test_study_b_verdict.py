"""Study B's verdict computed by the preregistered rule, on constructed tables for each outcome,
and on the committed records of protocol 6 (the page's answer).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from analyses.studies.study_b.verdict import OUTCOMES, rule, verdict, verdict_of

RECORDS = Path(__file__).resolve().parents[4] / "results" / "study-b"
TARGETS = {"wlmd": {"target_cosine": 0.9}}  # a row tests the claim if its sample's cosine is <= 0.9


def tables(differences: list[float], cosines: list[float] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A runs table (random noise; AdamW at 0.7 on every seed, WLMD 0.7 + the difference) and a
    WLMD table whose seeds' sample cosines are `cosines` (default: all testing, 0.5).
    """
    cosines = cosines or [0.5] * len(differences)
    runs = pd.DataFrame(
        [
            {
                "seed": seed,
                "model": model,
                "noise": "random",
                "test_acc_after": 0.7 + (d if model == "wlmd" else 0),
            }
            for seed, d in enumerate(differences)
            for model in ("adamw", "wlmd")
        ]
    )
    wlmd = pd.DataFrame([{"seed": s, "samples": 4, "sample_walker_cosine": c} for s, c in enumerate(cosines)])
    return runs, wlmd


@pytest.mark.parametrize(
    ("differences", "outcome"),
    [
        ([0.30, 0.32, 0.34], "supported"),  # interval above 0, upper end above 0.2
        ([-0.02, 0.03, 0.08], "contradicted"),  # protocol 6's shape: spans 0, below 0.2
        ([-0.2, 0.1, 0.4], "undecided"),  # spans 0 and 0.2
        ([0.08, 0.09, 0.10], "contradicted"),  # above 0 and below 0.2: both clauses hold
    ],
)
def test_each_outcome_from_constructed_tables(differences, outcome):
    runs, wlmd = tables(differences)
    found = verdict_of(runs, wlmd, TARGETS)
    assert found.outcome == outcome and found.seeds == 3
    assert found.mean == pytest.approx(sum(differences) / 3)
    assert found.low < found.mean < found.high


def test_when_both_clauses_hold_contradicted_wins_and_says_so():
    found = rule(3, 0.09, 0.05, 0.13)
    assert found.outcome == "contradicted" == OUTCOMES[0]
    assert any("also lies above 0" in r and "added after the results" in r for r in found.reasons)
    # One clause alone: no tie-break is mentioned.
    assert not any("tie-break" in r for r in rule(3, 0.03, -0.02, 0.08).reasons)


def test_only_seeds_that_test_the_claim_count_and_fewer_than_two_are_undecided():
    # Seed 2's sample is too close to its start: the two left cannot make the rule's interval...
    runs, wlmd = tables([0.30, 0.32, 0.34], cosines=[0.5, 0.5, 0.95])
    assert verdict_of(runs, wlmd, TARGETS).seeds == 2
    # ... and with one testing seed there is no interval at all.
    runs, wlmd = tables([0.30, 0.32, 0.34], cosines=[0.5, 0.95, 0.95])
    found = verdict_of(runs, wlmd, TARGETS)
    assert (found.outcome, found.seeds, math.isnan(found.low)) == ("undecided", 1, True)
    assert found.reasons == ("1 seed tests the claim: no interval",)
    # Without a WLMD table no seed tests it.
    assert verdict_of(runs, None, TARGETS).reasons == ("no seed tests the claim",)


def test_protocol_6s_records_are_contradicted_by_one_clause_only():
    found = verdict(RECORDS / "protocol-6")
    assert found.outcome == "contradicted" and found.seeds == 3
    assert found.low < 0 < found.high < 0.2  # only one outcome holds: the precedence changes nothing
    assert not any("tie-break" in r for r in found.reasons)
