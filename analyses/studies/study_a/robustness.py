"""The robustness readings preregistered beside the decision's endpoint, per cell, from the records.

Study A's decision (docs/study_a_log.md, "Weight decay or imbalance?") reads the rule reached at
any evaluation (`decision`); beside it, fixed at the same time: the rule held at two or more
consecutive evaluations, the rule kept at the end, and the 99% variant of each; stage 1 is also
read at epoch 3,000, to compare with stage 2. They describe; no reading depends on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from analyses.report.records import FINISHED, RunState, config_label, configurations
from interp.store.run_folder import read_metrics

READ_AT = 3000


def _at_rule(record: dict[str, Any], threshold: float) -> bool:
    return record.get("val/acc", 0.0) >= threshold and record.get("adv/acc", 0.0) >= threshold


def held(records: Sequence[dict[str, Any]], threshold: float = 1.0) -> bool:
    """Whether val and adv accuracy are both at `threshold` or above at two consecutive evaluations."""
    flags = [_at_rule(r, threshold) for r in sorted(records, key=lambda r: r["step"])]
    return any(a and b for a, b in zip(flags, flags[1:]))


def run_readings(run: RunState) -> dict[str, bool]:
    """One finished run's readings: the rule (and its 99% variant) reached, reached by epoch 3,000,
    held at two consecutive evaluations, kept at the end.
    """
    records = read_metrics(run.spec.out)
    row = {}
    for name, threshold in (("rule", 1.0), ("rule-99", 0.99)):
        milestone = run.milestones.get(name, {})
        step = milestone.get("step")
        row |= {
            f"{name}: reached": step is not None,
            f"{name}: by epoch {READ_AT:,}": step is not None and step <= READ_AT,
            f"{name}: held at 2 evaluations": held(records, threshold),
            f"{name}: kept at the end": bool(milestone.get("kept")),
        }
    return row


def robustness_table(runs: list[RunState]) -> pd.DataFrame:
    """Per configuration (sweep and coordinates but the seed): each reading as ``k/n`` over the
    finished runs (runs still training are left out, and counted in ``finished``).
    """
    rows = []
    for (sweep, *coords), group in configurations(runs).items():
        done = [r for r in group if r.status == FINISHED]
        readings = [run_readings(r) for r in done]
        row: dict[str, Any] = {"sweep": sweep, "configuration": config_label(dict(coords))}
        row["finished"] = f"{len(done)} of {len(group)}"
        for key in readings[0] if readings else ():
            row[key] = f"{sum(r[key] for r in readings)}/{len(done)}"
        rows.append(row)
    return pd.DataFrame(rows)
