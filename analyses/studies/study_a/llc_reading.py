"""Issue 50's reading (b): does an LLC stage boundary meet study A's phase-2 onset?

The reading's rules were fixed in docs/llc_readings.md before it ran: on each LLC curve of a
committed series (whole model, each head), boundaries by `interp.stages.find_stages` with
``method="llc"`` (smooth 1, plateau_tol 0.05, min_size 2) and ``method="changepoint"`` (its
default penalty); the onset is `find_rise(metrics, ("val/acc", "adv/acc"), 1.0, tol=0.05)` mapped
to the nearest checkpoint; a boundary *meets* the onset if it lies within `NEAR` checkpoints
(positions in the checkpoint list) of the onset's checkpoint. The primary reading is the
whole-model curve with the ``llc`` rule.

The records: one `evolve` table a curve (``llc.csv``: one row a chain and checkpoint, with the
estimate and its standard error), committed under ``results/llc/reading-b/SERIES/PART.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_a.evolution import phase2
from interp.stages import find_stages
from interp.store.run_folder import read_metrics

ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "results" / "llc" / "reading-b"
"""The reading's committed records: ``SERIES/PART.csv`` and the calibration."""
SERIES = ROOT / "results" / "study-a" / "series"
"""The committed weight series whose metrics give the onsets."""

NEAR = 2
"""Checkpoints between a boundary and the onset's checkpoint that still count as meeting it."""

RULES = {"llc": {"smooth": 1.0, "plateau_tol": 0.05, "min_size": 2}, "changepoint": {}}


def onset_step(series: str | Path) -> int | None:
    """The series' phase-2 onset: study A's `phase2`, which is the reading's rule
    (`find_rise(metrics, ("val/acc", "adv/acc"), 1.0, tol=0.05)`).
    """
    rise = phase2(read_metrics(series))
    return None if rise is None else rise.onset


def curve_reading(table: pd.DataFrame, onset: int | None) -> list[dict[str, Any]]:
    """Both rules on one curve: the boundaries, and whether one meets `onset`.

    Args:
        table: An `evolve` llc table (columns ``step``, ``estimate``, ``se``; a row a chain).
        onset: The phase-2 onset's epoch (None: the run had none).

    Returns:
        One row a rule: ``rule``, ``boundaries`` (epochs), ``onset checkpoint``, ``nearest``
        (positions between the onset's checkpoint and the nearest boundary; None without either)
        and ``meets``.
    """
    per_step = table.groupby("step")[["estimate", "se"]].first().reset_index()
    steps = per_step["step"].tolist()
    at = None if onset is None else min(range(len(steps)), key=lambda i: abs(steps[i] - onset))
    rows = []
    for rule, options in RULES.items():
        stages = find_stages(per_step, ("estimate",), method=rule, **options)
        distances = [abs(steps.index(b) - at) for b in stages.boundaries] if at is not None else []
        nearest = min(distances) if distances else None
        rows.append(
            {
                "rule": rule,
                "boundaries": list(stages.boundaries),
                "onset checkpoint": None if at is None else steps[at],
                "nearest": nearest,
                "meets": nearest is not None and nearest <= NEAR,
            }
        )
    return rows


def reading_b(records: str | Path = RECORDS, series_root: str | Path = SERIES) -> pd.DataFrame:
    """Every committed curve's reading: one row a series, curve and rule.

    Args:
        records: ``results/llc/reading-b`` (``SERIES/PART.csv``).
        series_root: ``results/study-a/series`` (the series' metrics, for their onsets).
    """
    rows = []
    for folder in sorted(p for p in Path(records).iterdir() if p.is_dir()):
        onset = onset_step(Path(series_root) / folder.name)
        for path in sorted(folder.glob("*.csv"), key=lambda p: (p.stem != "whole", p.stem)):
            table = pd.read_csv(path)
            for row in curve_reading(table, onset):
                rows.append({"series": folder.name, "curve": path.stem, "onset": onset} | row)
    return pd.DataFrame(rows)
