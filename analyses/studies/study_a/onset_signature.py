"""Does the gradient-conflict signature precede the rule at both ratios, or only at r = 0.9?

The decision's preregistration (docs/study_a_log.md, "Weight decay or imbalance?") asks this
descriptively, not as a test: the study says the opposing examples' gradient first fights the
consistent one's (``cos(g_c, g_o) < 0``) and is then amplified past the stationary value
``r / (1 - r)`` until the two agree (``cos > 0``) and the rule forms. Every run logs both at each
evaluation (``train/grad_cos``; ``train/grad_amp_weighted``, the amplification relative to
``r / (1 - r)``, so 1 is the stationary value).

How a run is described (fixed 2026-12-05, while stage 1 was still training and before these
measures were read on any of its runs):

* **onset** and **end** of phase 2: `analyses.studies.study_a.evolution.phase2` (study A's
  preregistered `find_rise` rule, unchanged);
* **before**: the `WINDOW` evaluations up to and including the onset; **during**: the
  evaluations after the onset up to and including the end;
* **conflict before**: the lowest cosine before is below 0; **agreement during**: the highest
  cosine during is above 0; **amplified before**: the highest amplification before is above 1;
* **signature**: all three. A run with no phase 2 has no onset, and is described instead by
  whether the same sequence (an evaluation with cosine below 0 and amplification above 1,
  followed later by one with cosine above 0) happens anywhere in it (``signature anywhere``),
  which says whether the signature occurs without the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from analyses.report.records import FINISHED, RunState
from analyses.studies.study_a.evolution import phase2
from analyses.studies.study_a.stats import outcome
from interp.store.run_folder import read_metrics

WINDOW = 5
"""Evaluations up to and including the onset that count as "before" it."""

COS, AMP = "train/grad_cos", "train/grad_amp_weighted"


def _logged(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluations that logged both gradient measures, in step order."""
    return sorted((r for r in records if COS in r and AMP in r), key=lambda r: r["step"])


def signature_anywhere(records: Sequence[dict[str, Any]]) -> bool:
    """Whether an evaluation with cosine < 0 and amplification > 1 is followed later by one with
    cosine > 0 (the signature's sequence, wherever it happens in the run).
    """
    armed = False
    for record in _logged(records):
        if armed and record[COS] > 0:
            return True
        armed = armed or (record[COS] < 0 and record[AMP] > 1)
    return False


def describe(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One run's description (the module docstring's definitions) from its metrics records.

    Returns:
        ``onset`` and ``end`` (None without a phase 2), ``cos before (min)``,
        ``cos during (max)``, ``amp before (max)`` (None without a phase 2), ``signature``
        (None without a phase 2) and ``signature anywhere``.
    """
    logged = _logged(records)
    rise = phase2(records)
    row: dict[str, Any] = {"onset": None, "end": None, "cos before (min)": None}
    row |= {"cos during (max)": None, "amp before (max)": None, "signature": None}
    if rise is not None:
        before = [r for r in logged if r["step"] <= rise.onset][-WINDOW:]
        during = [r for r in logged if rise.onset < r["step"] <= rise.end]
        if before and during:
            row |= {
                "cos before (min)": min(r[COS] for r in before),
                "cos during (max)": max(r[COS] for r in during),
                "amp before (max)": max(r[AMP] for r in before),
            }
            row["signature"] = (
                row["cos before (min)"] < 0 and row["cos during (max)"] > 0 and row["amp before (max)"] > 1
            )
        row |= {"onset": rise.onset, "end": rise.end}
    return row | {"signature anywhere": signature_anywhere(logged)}


def signature_table(runs: list[RunState]) -> pd.DataFrame:
    """One row per finished run: its cell, seed, outcome and `describe`'s columns."""
    rows = [
        {"sweep": run.sweep, **run.config, "seed": run.spec.tags.get("seed"), "outcome": outcome(run)}
        | describe(read_metrics(run.spec.out))
        for run in runs
        if run.status == FINISHED
    ]
    return pd.DataFrame(rows)


def signature_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per cell (every column but the seed and the descriptions): runs, runs with a phase 2,
    those with the signature before it, and runs with the signature anywhere, as ``k/n``.
    """
    cells = [c for c in ("sweep", "preset", "r") if c in table.columns]
    rows = []
    for key, group in table.groupby(cells, sort=True):
        with_onset = group[group["onset"].notna()]
        rows.append(
            dict(zip(cells, key if isinstance(key, tuple) else (key,)))
            | {
                "runs": len(group),
                "phase 2": f"{len(with_onset)}/{len(group)}",
                "signature before the rule": f"{int(with_onset['signature'].eq(True).sum())}/{len(with_onset)}",
                "signature anywhere": f"{int(group['signature anywhere'].sum())}/{len(group)}",
            }
        )
    return pd.DataFrame(rows)
