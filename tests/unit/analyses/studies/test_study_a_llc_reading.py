"""Issue 50's reading (b) rule (analyses/studies/study_a/llc_reading.py) on LLC curves built
here with a known peak, and on the committed records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyses.studies.study_a.llc_reading import (
    EXPLORATORY,
    NEAR,
    RULES,
    curve_reading,
    exploratory_summary,
    headline,
    onset_step,
    primary_summary,
    reading_b,
    reading_b_figure,
    rule_contrast,
)

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


def _series(root: Path, name: str, layers: int, rule: int | None, last: tuple[float, float]) -> None:
    """A series (config, DONE) and its whole-model curve ending at `last` = (estimate, se)."""
    import json

    series = root / "series" / name
    series.mkdir(parents=True)
    (series / "config.json").write_text(json.dumps({"model": {"n_layers": layers, "n_heads": layers}}))
    (series / "DONE").write_text(json.dumps({"format_version": 1, "milestones": {"rule": {"step": rule}}}))
    (root / "records" / name).mkdir(parents=True)
    curve = pd.DataFrame(
        [
            {"chain": c, "step": s, "estimate": e, "se": se}
            for s, (e, se) in ((0, (1.0, 9.0)), (3000, last))
            for c in (0, 1)
        ]
    )
    curve.to_csv(root / "records" / name / "whole.csv", index=False)


def test_the_second_question_pairs_runs_with_and_without_the_rule_within_an_architecture(tmp_path):
    _series(tmp_path, "two-found", 2, rule=1500, last=(100.0, 3.0))
    _series(tmp_path, "two-near", 2, rule=None, last=(95.0, 4.0))  # 5 apart, 2 SE = 10
    _series(tmp_path, "two-far", 2, rule=None, last=(60.0, 4.0))  # 40 apart
    _series(tmp_path, "one-found", 1, rule=900, last=(10.0, 1.0))  # no one-layer run without it
    frame = rule_contrast(tmp_path / "records", tmp_path / "series").set_index("not found")
    assert set(frame["architecture"]) == {"2L2H"} and set(frame["found"]) == {"two-found"}
    assert frame.loc["two-near", "2 SE"] == 10.0 and frame.loc["two-near", "difference"] == 5.0
    assert not frame.loc["two-near", "differs"] and frame.loc["two-far", "differs"]
    assert frame.loc["two-far", "epoch (found)"] == 3000 and frame.loc["two-far", "llc (not)"] == 60.0


def test_the_headline_counts_the_primary_readings_and_says_the_pairs_direction():
    frame = pd.DataFrame(
        [
            {"series": s, "curve": c, "rule": r, "onset": onset, "meets": meets}
            for s, onset, meets in (("a", 200.0, True), ("b", 300.0, False), ("c", np.nan, False))
            for c in ("whole", "L0H0")
            for r in ("llc", "changepoint")
        ]
    )
    pairs = pd.DataFrame({"difference": [5.0, -3.0, 1.0], "differs": [True, True, False]})
    text = headline(frame, pairs)
    # the series without an onset is left out of both counts
    assert "in **1 of 2** series with an onset" in text and "4 of 8 curve-and-rule pairs" in text
    assert "2 of 3 pairs differ by more than 2 SE (the run with the rule higher in 1 and lower in 1" in text
    assert "(the run with the rule lower in each)" in headline(frame, pairs.assign(difference=-1.0))
    assert headline(frame, pairs.assign(differs=False)).endswith("0 of 3 pairs differ by more than 2 SE.")
    assert "waits for a series without the rule" in headline(frame, pd.DataFrame())


def test_the_committed_records_second_question_pairs_only_a_run_of_each_kind():
    from interp.store.run_folder import read_done

    records, series = ROOT / "results" / "llc" / "reading-b", ROOT / "results" / "study-a" / "series"
    reached = {
        p.name: read_done(series / p.name)["milestones"]["rule"]["step"] is not None
        for p in records.iterdir()
        if (p / "whole.csv").is_file()
    }
    frame = rule_contrast(records, series)
    assert frame.empty == all(reached.values())  # it waits while every committed series found the rule
    assert all(
        reached[a] and not reached[b] for a, b in zip(frame.get("found", []), frame.get("not found", []))
    )


def test_the_figure_draws_each_series_whole_curve_with_its_onset_and_boundaries():
    records, series = ROOT / "results" / "llc" / "reading-b", ROOT / "results" / "study-a" / "series"
    fig = reading_b_figure(records, series)
    frame = reading_b(records, series)
    drawn = frame[(frame["curve"] == "whole") & (frame["rule"] == "llc")]
    assert [t.name for t in fig.data] == sorted(drawn["series"])
    lines = [(shape.x0, shape.line.color) for shape in fig.layout.shapes]
    for name, boundaries in zip(drawn["series"], drawn["boundaries"]):
        onset = onset_step(series / name)
        if onset is not None:  # a series that never reached the rule has no onset line
            assert (onset, "red") in lines
        assert all((b, "grey") in lines for b in boundaries)
    onsets = [o for o in (onset_step(series / name) for name in drawn["series"]) if o is not None]
    assert len([c for _, c in lines if c == "red"]) == len(onsets)
    assert all(0 not in trace.x for trace in fig.data)  # a log axis: epoch 0 left out


def test_the_primary_summary_says_each_series_and_counts_only_series_with_an_onset():
    rows = []
    for series, onset in (("found", 110), ("never", None)):
        for row in curve_reading(_curve(peak_at=8), onset):
            rows.append({"series": series, "curve": "whole", "onset": onset} | row)
    frame = pd.DataFrame(rows)  # the onset column holds NaN for "never", as reading_b's does
    text = primary_summary(frame)
    assert (
        "* **Primary reading, found** (whole model, `llc` rule): a boundary meets the onset (epoch 110,"
        in text
    )
    assert "* **Primary reading, never**: no phase-2 onset" in text
    met = int(frame[frame["series"] == "found"]["meets"].sum())
    assert text.endswith(f"{met} of 2 pairs meet it.")  # the two rules of "found" only


def test_the_exploratory_rule_is_the_preregistered_one_with_slopes_per_checkpoint():
    assert EXPLORATORY["llc per checkpoint"] == {**RULES["llc"], "slope": "checkpoint"}
    records, series = ROOT / "results" / "llc" / "reading-b", ROOT / "results" / "study-a" / "series"
    frame = reading_b(records, series, rules=EXPLORATORY)
    assert set(frame["rule"]) == {"llc per checkpoint"}
    near_miss = frame[
        (frame["series"] == "replication-mpsp-2l2h-r0.9-memorised") & (frame["curve"] == "whole")
    ]
    assert near_miss["boundaries"].iloc[0]  # the preregistered rule finds none on this curve
    assert reading_b(records, series).query("rule == 'llc'")["boundaries"].map(len).min() == 0
    text = exploratory_summary(frame)
    whole = frame[frame["onset"].notna() & (frame["curve"] == "whole")]
    assert text.startswith("*Exploratory*")
    assert f"in {int(whole['meets'].sum())} of {len(whole)} series" in text
    for row in whole.itertuples():  # each series named on the side it falls
        assert f"`{row.series}`" in (text.split("; not in")[0] if row.meets else text.split("; not in")[1])
