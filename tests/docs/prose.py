"""What the docs tests that check a page's numbers against its records share: the page's prose,
numbers written as the pages write them, and the readings that more than one page quotes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUDY_B = ROOT / "results" / "study-b"


def page_prose(page: Path) -> str:
    """`page` without its code cells, its lines joined (a number may wrap onto the next line)."""
    return re.sub(r"\s+", " ", re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL))


def joined(values: Iterable[float], fmt: str = "{:.3f}") -> str:
    """``a, b and c``."""
    parts = [fmt.format(v) for v in values]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def span(values: Iterable[float], fmt: str = "{:,.0f}") -> str:
    """``lowest-highest``."""
    values = list(values)
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def regenerated_shift(
    records: Path = STUDY_B / "protocol-6", models: Path = STUDY_B / "protocol-6-models"
) -> dict[str, float]:
    """How the models regenerated from protocol 6's state (`models`) differ from its records:
    ``shift``, the largest change of a test accuracy after injection, and the random-noise
    WLMD - AdamW difference of the regenerated models (``mean``, ``low``, ``high``: its 95%
    t-interval).
    """
    from analyses.report.stats import t_interval
    from analyses.studies.study_b.tables import read_frame

    key = ["seed", "model", "noise"]
    kept = read_frame(models / "study_b_runs.csv").set_index(key)
    recorded = read_frame(records / "study_b_runs.csv").set_index(key).loc[kept.index]
    acc = kept.xs("random", level="noise")["test_acc_after"].unstack("model")
    mean, low, high = t_interval((acc["wlmd"] - acc["adamw"]).tolist())
    shift = (kept["test_acc_after"] - recorded["test_acc_after"]).abs().max()
    return {"shift": float(shift), "mean": mean, "low": low, "high": high}
