"""The decision's robustness readings (`analyses.studies.study_a.robustness`) on run folders
written here: a rule seen at one evaluation is not held, two in a row are; 99% is its own reading.
"""

from __future__ import annotations

import json
from pathlib import Path

from analyses.report.records import FINISHED, UNFINISHED, RunState
from analyses.studies.study_a.robustness import held, robustness_table, run_readings
from interp.sweep.specs import RunSpec


def _run(folder: Path, accuracies: list[tuple[int, float, float]], *, status: str = FINISHED, seed: int = 0):
    """A run whose metrics are (step, val, adv) rows; its milestones as the library would find them."""
    folder.mkdir(parents=True)
    records = [{"step": s, "val/acc": v, "adv/acc": a} for s, v, a in accuracies]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    def milestone(threshold: float) -> dict:
        steps = [s for s, v, a in accuracies if v >= threshold and a >= threshold]
        last = accuracies[-1]
        return {"step": steps[0] if steps else None, "kept": min(last[1:]) >= threshold}

    spec = RunSpec(folder, {}, {"name": "mpsp"}, {}, {"preset": "mpsp-2l2h", "r": 0.5, "seed": seed})
    milestones = {"rule": milestone(1.0), "rule-99": milestone(0.99)}
    return RunState("stage", spec, status, accuracies[-1][0], {}, {}, milestones)


def test_a_rule_seen_once_is_reached_but_not_held(tmp_path):
    once = [(0, 0.5, 0.5), (25, 1.0, 1.0), (50, 1.0, 0.995), (3500, 1.0, 0.5)]
    assert not held([{"step": s, "val/acc": v, "adv/acc": a} for s, v, a in once])
    found = run_readings(_run(tmp_path / "once", once))
    assert found["rule: reached"] and found["rule: by epoch 3,000"]
    assert not found["rule: held at 2 evaluations"] and not found["rule: kept at the end"]
    # 99%: reached at epoch 25 and still there at 50, so held; lost by the end.
    assert found["rule-99: held at 2 evaluations"] and not found["rule-99: kept at the end"]


def test_a_late_rule_counts_at_4000_and_not_at_3000(tmp_path):
    late = [(0, 0.5, 0.5), (3000, 1.0, 0.9), (3025, 1.0, 1.0), (4000, 1.0, 1.0)]
    found = run_readings(_run(tmp_path / "late", late))
    assert found["rule: reached"] and not found["rule: by epoch 3,000"]
    assert found["rule: held at 2 evaluations"] and found["rule: kept at the end"]


def test_the_table_counts_finished_runs_only(tmp_path):
    runs = [
        _run(tmp_path / "a", [(0, 0.5, 0.5), (25, 1.0, 1.0), (50, 1.0, 1.0)], seed=0),
        _run(tmp_path / "b", [(0, 0.5, 0.5), (50, 0.5, 0.5)], seed=1),
        _run(tmp_path / "c", [(0, 1.0, 1.0), (25, 1.0, 1.0)], status=UNFINISHED, seed=2),
    ]
    (row,) = robustness_table(runs).to_dict("records")
    assert row["finished"] == "2 of 3" and row["configuration"] == "mpsp-2l2h, r = 0.5"
    assert row["rule: reached"] == row["rule: held at 2 evaluations"] == row["rule: kept at the end"] == "1/2"
