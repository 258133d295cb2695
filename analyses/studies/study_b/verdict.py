"""Study B's verdict by the preregistered rule, computed from the records (not applied by hand).

The rule, fixed before protocol 3's seeds ran and kept through protocol 6 (docs/study_b.md): on
random noise, the paired WLMD - AdamW difference in test accuracy after injection, over the
seeds whose sample tests the claim (`analyses.studies.study_b.tables.untested` is None), with
its 95% Student-t interval (`analyses.studies.study_b.tables.paired_differences`):

* **supported** if the interval lies above 0;
* **contradicted** (the claim as stated, a gap of about 0.2) if its upper end is below 0.2;
* **undecided** otherwise, which includes fewer than two testing seeds (no interval).

As written, the first two can both hold (an interval inside (0, 0.2): WLMD keeps more, but
less than the claimed gap). `verdict` makes them exclusive: **contradicted wins**, because
the rule's second clause tests the claim as stated, and its reasons say that the difference
was above 0 too. This precedence was added after the results (issue 47); protocol 6 meets only
one outcome (its interval's lower end is below 0), so it changes nothing there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_b.measure import SETTINGS_FILE
from analyses.studies.study_b.tables import paired_differences, read_frame

CLAIMED_GAP = 0.2  # the study's gap: about 0.95 (WLMD) against below 0.75 (AdamW), random noise
NOISE = "random"  # the noise the rule reads
OUTCOMES = ("contradicted", "supported", "undecided")  # in precedence order: the first that holds


@dataclass(frozen=True)
class Verdict:
    """One verdict of the preregistered rule.

    Attributes:
        outcome: One of `OUTCOMES`.
        reasons: Why, one sentence each (the interval, which clauses held, the seeds).
        seeds: The seeds that test the claim and have both models' random-noise rows.
        mean: Their mean WLMD - AdamW difference (NaN without one).
        low: The 95% t-interval's lower end (NaN with fewer than two seeds).
        high: Its upper end.
    """

    outcome: str
    reasons: tuple[str, ...]
    seeds: int
    mean: float
    low: float
    high: float


def rule(seeds: int, mean: float, low: float, high: float, gap: float = CLAIMED_GAP) -> Verdict:
    """The rule on one paired difference over the testing seeds (`paired_differences`' ``tested``
    columns for random noise); both clauses holding resolve to contradicted (module docstring).
    """
    if seeds < 2 or math.isnan(low) or math.isnan(high):
        why = "no seed tests the claim" if seeds == 0 else f"{seeds} seed tests the claim: no interval"
        return Verdict("undecided", (why,), seeds, mean, low, high)
    interval = f"WLMD - AdamW {mean:+.4f}, 95% t-interval [{low:+.4f}, {high:+.4f}] over {seeds} seeds"
    above, below = low > 0, high < gap
    if below:
        reasons = [interval, f"upper end below {gap}: the claim as stated is contradicted"]
        if above:
            reasons.append(
                "the interval also lies above 0 (the rule's 'supported'): contradicted takes precedence, "
                "a tie-break added after the results"
            )
        return Verdict("contradicted", tuple(reasons), seeds, mean, low, high)
    if above:
        return Verdict("supported", (interval, "the interval lies above 0"), seeds, mean, low, high)
    return Verdict(
        "undecided",
        (interval, f"the interval reaches 0 or below and {gap} or above"),
        seeds,
        mean,
        low,
        high,
    )


def verdict_of(runs: pd.DataFrame, wlmd: pd.DataFrame | None, settings: Mapping[str, Any]) -> Verdict:
    """The rule's verdict on a runs table and WLMD table (`table`, `wlmd_frame` rows) measured
    with `settings` (as JSON).
    """
    if not len(runs):
        return rule(0, math.nan, math.nan, math.nan)
    row = paired_differences(runs, wlmd, settings).set_index("noise").loc[NOISE]
    return rule(int(row["tested"]), row["tested_mean"], row["tested_low"], row["tested_high"])


def verdict(dest: str | Path) -> Verdict:
    """The rule's verdict on exported records (``results/study-b/<protocol>``: its
    ``study_b_runs.csv``, ``study_b_wlmd.csv`` and ``settings.json``).
    """
    dest = Path(dest)
    settings = json.loads((dest / SETTINGS_FILE).read_text()) if (dest / SETTINGS_FILE).exists() else {}
    wlmd = read_frame(dest / "study_b_wlmd.csv")
    return verdict_of(read_frame(dest / "study_b_runs.csv"), wlmd if len(wlmd) else None, settings)
