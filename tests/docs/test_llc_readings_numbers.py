"""Numbers in docs/llc_readings.md's prose about reading (b), each read back from the committed
records under results/llc/reading-b/ and results/study-a/series/ (the tables and the primary
readings are printed by the page's own cells from the same records).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.studies.study_a.llc_reading import RECORDS, SERIES, curve_reading, onset_step, rule_contrast
from interp.dissect.llc_figures import checkpoint_frame
from interp.store.run_folder import read_done

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "llc_readings.md").read_text()


def _prose() -> str:
    """The page without its code cells and bold marks, its lines joined (a number may wrap)."""
    text = re.sub(r"```.*?```", "", PAGE, flags=re.DOTALL).replace("**", "")
    return re.sub(r"\s+", " ", text)


def _curve(series: str) -> pd.DataFrame:
    """The whole-model curve, one row a checkpoint."""
    return checkpoint_frame(pd.read_csv(RECORDS / series / "whole.csv"))


def test_the_stage_2_series_collapse_and_what_each_rule_found():
    name = "replication-mpsp-2l2h-r0.9-memorised"
    curve = _curve(name)
    drop = curve["estimate"].diff().idxmin()  # the largest fall between neighbouring checkpoints
    before, after = curve.iloc[drop - 1], curve.iloc[drop]
    assert (
        f"rose through memorisation to {before['estimate']:.1f} at epoch {int(before['step']):,} and collapsed "
        f"to {after['estimate']:.1f} at epoch {int(after['step']):,}" in _prose()
    )
    onset = onset_step(SERIES / name)
    rules = {r["rule"]: r for r in curve_reading(pd.read_csv(RECORDS / name / "whole.csv"), onset)}
    assert "the largest fall between neighbouring checkpoints of that curve" in _prose()
    assert rules["llc"]["boundaries"] == [] and "the rule found no boundary at all" in _prose()
    around = [s for s in curve["step"] if before["step"] <= s <= onset + 75]
    assert set(np.diff(around)) == {25} and "with checkpoints 25 epochs apart around the onset" in _prose()
    assert f"put a boundary {rules['changepoint']['nearest']} checkpoints from this onset" in _prose()
    steps = curve["step"].tolist()
    gap = steps.index(min(steps, key=lambda s: abs(s - onset))) - drop
    assert f"{gap} checkpoints before it here" in _prose()
    headline = _curve("wd-headline-mpsp-2l2h-r0.9")
    at = headline["step"].tolist().index(onset_step(SERIES / "wd-headline-mpsp-2l2h-r0.9"))
    # "fell steeply ... at the onset's own checkpoint": to under a tenth of the checkpoint before.
    assert headline["estimate"][at] < 0.1 * headline["estimate"][at - 1]


def test_the_second_questions_pairs_and_their_directions():
    pairs = rule_contrast()
    higher = int((pairs["difference"] > 0).sum())
    assert pairs["differs"].all() and len(pairs) == 4
    assert (
        f"all {len(pairs)} two-layer pairs differ, but not in one direction: the run that found the rule "
        f"has the higher LLC in {higher} pairs and the lower in {len(pairs) - higher}" in _prose()
    )
    last = {
        s: _curve(s).iloc[-1]["estimate"]
        for s in (p.name for p in RECORDS.iterdir() if (p / "whole.csv").exists())
    }
    config = json.loads((SERIES / "mpsp-2l2h-r0.9" / "config.json").read_text())["train"]
    assert (config["weight_decay"], config["epochs"]) == (0.1, 1500) and round(last["mpsp-2l2h-r0.9"]) == 2
    others = [v for k, v in last.items() if k.startswith(("wd-headline-mpsp-2l2h", "replication-mpsp-2l2h"))]
    assert f"between {min(others):.0f} and {max(others):.0f})" in _prose()
    for name in (k for k in last if k in {"wd-headline-mpsp-2l2h-r0.9", "wd-headline-mpsp-2l2h-r0.5"}):
        train = json.loads((SERIES / name / "config.json").read_text())["train"]
        assert train["weight_decay"] == 0.4 and train["epochs"] >= 3000
    train = json.loads((SERIES / "replication-mpsp-2l2h-r0.9-memorised" / "config.json").read_text())["train"]
    assert (
        train["epochs"] >= 3000 and "the three others, at 0.4 or trained to 3,000 epochs or more" in _prose()
    )


def test_the_near_miss_is_a_few_adversarial_examples_short_of_the_rule():
    series = SERIES / "replication-mpsp-2l2h-r0.9-memorised"
    done = read_done(series)
    n_adv = json.loads((series / "config.json").read_text())["task"]["n_adv"]
    wrong = round((1 - done["final"]["adv/acc"]) * n_adv)
    assert done["milestones"]["rule"]["step"] is None
    assert f"stage 2's near miss ({wrong} adversarial examples short of the rule)" in _prose()


def test_the_r_05_series_swings_with_small_standard_errors():
    late = _curve("wd-headline-mpsp-2l2h-r0.5").query("step >= 725")
    assert (
        f"from epoch 725 on the r = 0.5 series swings between {late['estimate'].min():.1f} and "
        f"{late['estimate'].max():.0f} with standard errors of {late['se'].min():.1f} to {late['se'].max():.0f}"
        in _prose()
    )


def test_how_many_estimates_carry_flags_and_the_dense_checkpoints_around_the_onset():
    per_checkpoint = [checkpoint_frame(pd.read_csv(path)) for path in sorted(RECORDS.glob("*/*.csv"))]
    flagged = sum(int((frame["flags"] != "").sum()) for frame in per_checkpoint)
    total = sum(len(frame) for frame in per_checkpoint)
    assert f"({flagged} of the {total} checkpoint estimates over every curve:" in _prose()
    steps = _curve("mpsp-2l2h-r0.9")["step"].tolist()
    assert set(range(100, 301, 10)) <= set(steps)  # and a few log-spaced ones between
    assert "(a checkpoint at least every 10 epochs across epochs 100-300)" in _prose()


def test_neither_calibration_found_a_healthy_setting():
    from analyses.llc_calibrate import CalibrateResult
    from analyses.studies.study_c.llc_reading import RECORDS as READING_A

    for folder in (READING_A / "calibration", RECORDS / "calibration"):
        assert (CalibrateResult.load(folder).to_frame()["flags"] != "").all(), folder
    assert "Neither reading's calibration found a setting at which the chains were healthy" in _prose()


def _plain() -> str:
    """The prose without code marks (reading (a)'s paragraphs mark names as code)."""
    return _prose().replace("`", "")


def test_reading_as_result_reads_every_seeds_record():
    from analyses.studies.study_c.llc_reading import RECORDS as READING_A
    from analyses.studies.study_c.llc_reading import reading_a

    table = reading_a()
    assert len(table) == 3  # every preregistered seed has landed
    g = "{:.3g}".format
    for _, row in table.iterrows():
        last = checkpoint_frame(pd.read_csv(READING_A / f"seed_{row['seed']}" / "llc.csv")).iloc[-1]
        assert bool(row["rises"]) and not bool(row["falls"])  # "rose ... and did not fall"
        assert int(row["peak step"]) == int(row["t_gen"])  # "came at t_gen itself"
        assert row["llc (peak)"] < row["llc (end)"] < last["estimate"]  # "went on rising"
        assert (
            f"Seed {row['seed']}: from {g(row['llc (start)'])} at step {int(row['start step'])} to "
            f"{g(row['llc (t_mem_noisy)'])} at t_mem_noisy (step {int(row['t_mem_noisy'])}), a rise of "
            f"{g(row['rise'])} against 2 SE = {g(row['rise 2 SE'])}; its highest value over [t_mem_noisy, t_gen] "
            f"was {g(row['llc (peak)'])} at t_gen itself (step {int(row['t_gen'])}), and it went on rising, to "
            f"{g(row['llc (end)'])} at step {int(row['end step'])} (2 t_gen) and {g(last['estimate'])} at the last "
            f"step ({int(last['step']):,})" in _plain()
        )
    assert "In every seed the LLC rose" in _plain()


def test_reading_as_limits_read_the_calibration_and_the_chains():
    from analyses.llc_calibrate import CalibrateResult
    from analyses.studies.study_c.llc_reading import RECORDS as READING_A
    from models.build import build_model
    from models.config import config_from_dict

    cells = CalibrateResult.load(READING_A / "calibration").to_frame()
    assert len(cells) == 6 and cells["flags"].nunique() == 1 and len(cells["flags"][0].split(",")) == 3
    low = cells[cells["n_beta"] == cells["n_beta"].min()].sort_values("step_size")
    assert (low["step_size"].pct_change().dropna().round(6) == 9).all()  # tenfold steps
    ratios = low["estimate"].pct_change().dropna() + 1
    assert ratios.between(8, 12).all()  # "about tenfold"
    assert (
        f"({', '.join(map('{:.3g}'.format, low['estimate'][:2]))} and {low['estimate'].iloc[2]:.3g} at"
        in _plain()
    )
    best = cells[cells["recommended"]].iloc[0]
    assert best["step_size"] == cells["step_size"].min() and best["n_beta"] == cells["n_beta"].min()
    n_log_n = cells["n_beta"].max()
    assert abs(best["n_beta"] / n_log_n - 0.3) < 1e-9 and "its first n_beta (0.3 x n / log n)" in _plain()
    for folder in sorted(READING_A.glob("seed_*")):
        table = pd.read_csv(folder / "llc.csv")
        # every estimate flagged nonstationary, rhat and ess; the chains' loss still rising in each
        assert (table["flags"] == "nonstationary,rhat,ess").all() and (table["drift"] > 0).all()
        assert checkpoint_frame(table)["estimate"].max() < 1  # "under 1"
        model = json.loads((folder / "run" / "config.json").read_text())["model"]
        weights = sum(p.numel() for p in build_model(config_from_dict(model)).parameters())
        assert f"(under 1 for a model of {weights:,} weights)" in _plain()
