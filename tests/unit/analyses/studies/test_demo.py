"""`make demo`'s report: study A's answer first (from committed records), then "Your runs" without tests.

The results folders here are synthetic (run folders with config.json, metrics.jsonl and DONE, as
committed results hold them), except where a test reads this checkout's own records.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest
from scipy.stats import fisher_exact

from analyses.grids import Grid, expand
from analyses.report.records import load_results
from analyses.studies.grids import GRIDS
from analyses.studies.study_a.cli import demo_report
from analyses.studies.study_a.decision import decision as study_a_decision
from analyses.studies.study_a.decision import replication
from analyses.studies.study_a.demo import DECIDING, RESULTS, answer_section
from analyses.studies.study_a.grids import DEMO_EPOCHS
from interp.config import to_dict
from interp.metrics import milestones
from interp.sweep.specs import write_sweep
from tasks import MPSPTask

TASK = {"vocab": 12, "n": 4, "n_train": 64, "n_val": 16, "n_adv": 16}
BOTH = Grid(
    presets=("mpsp-2l2h", "mpsp-1l1h"), task=TASK, train={"epochs": 400}, axes={"r": [0.9, 0.5]}, seeds=4
)
# Runs that reach the rule, per (preset, r), out of BOTH's 4 seeds.
RULE = {("mpsp-2l2h", 0.9): 3, ("mpsp-2l2h", 0.5): 0, ("mpsp-1l1h", 0.9): 1, ("mpsp-1l1h", 0.5): 2}


def _write(spec, rule: bool) -> None:
    """A finished run: val and adv reach 100% at epoch 200 if `rule`, else the shortcut only."""
    records = [
        {
            "step": step,
            "train/acc": 1.0,
            "train/opposing/acc": 1.0 if rule and step >= 200 else 0.5,
            "val/acc": 1.0 if rule and step >= 200 else 0.9,
            "adv/acc": 1.0 if rule and step >= 200 else 0.1,
        }
        for step in range(0, spec.train["epochs"] + 1, 100)
    ]
    spec.out.mkdir(parents=True)
    config = {"format_version": 1, "model": spec.model, "task": spec.task, "train": spec.train}
    (spec.out / "config.json").write_text(json.dumps(config))
    (spec.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"epochs": records[-1]["step"], "final": records[-1]}
    summary["milestones"] = milestones(records, MPSPTask.milestones)
    (spec.out / "DONE").write_text(json.dumps({"format_version": 1, **summary}))


def _grid(folder: Path, grid: Grid, rule: dict, *, only: int | None = None) -> None:
    """`grid`'s sweep in `folder` with its first `only` runs (default all) written, seed-major."""
    specs = expand(grid, folder)
    write_sweep(folder, specs, {"grid": to_dict(grid)})
    for spec in sorted(specs, key=lambda s: s.tags["seed"])[:only]:
        _write(spec, spec.tags["seed"] < rule[spec.tags["preset"], spec.tags["r"]])


def _text(parts: list[str]) -> str:
    return re.sub(r"\s+", " ", " ".join(parts))


def test_the_answer_reads_finished_preregistered_grids_and_says_what_still_decides(tmp_path):
    results = tmp_path / "results"
    assert "no committed confirmation results" in _text(answer_section(results))
    _grid(results / "headline", BOTH, RULE)
    _grid(results / "wd-headline", BOTH, RULE, only=2)
    text = _text(answer_section(results))
    assert "Not decided yet." in text
    assert "the weight-decay headline: 2 of 16 runs finished; the replication: not started" in text
    p2 = fisher_exact([[3, 1], [0, 4]], alternative="greater").pvalue  # independent of the report
    p1 = fisher_exact([[1, 3], [2, 2]], alternative="less").pvalue
    assert "points the study's way in both models and is significant in neither" in text
    assert (
        "Two layers reached the rule in 3 of 4 runs at r = 0.9 and 0 of 4 at r = 0.5 (primary test: " in text
    )
    assert (
        f"one-sided Fisher p = {p2:.3g}; difference 0.75" in text
        and f"p = {p1:.3g}; difference -0.25" in text
    )
    assert "The weight-decay headline</b>" not in text  # a grid still training gets no reading
    assert "(2 finished; still training: no test is read until every run has finished)" in text
    assert text.index("The headline grid") < text.index("The wd-headline grid")

    # Both deciding grids finished: their readings follow the headline's, one model for the replication.
    (results / "wd-headline").rename(tmp_path / "partial")
    strong = {**RULE, ("mpsp-2l2h", 0.9): 4}
    _grid(results / "wd-headline", BOTH, strong)
    two_layers = Grid(
        presets=("mpsp-2l2h",), task=TASK, train={"epochs": 400}, axes={"r": [0.9, 0.5]}, seeds=4
    )
    _grid(results / "replication", two_layers, strong)
    text = _text(answer_section(results))
    assert "Not decided yet." not in text and "The grids preregistered to decide it have finished" in text
    assert "The weight-decay headline</b> (16 runs, all finished;" in text
    assert "points the study's way in both models and is significant in two layers" in text  # 4/4 vs 0/4
    assert (
        "The replication</b> (8 runs, all finished; <code>results/study-a/replication</code>) points the "
        in text
    )
    assert "study's way in two layers and is significant in two layers" in text


def test_the_demo_report_opens_with_the_answer_and_its_own_runs_have_no_test(tmp_path):
    results = tmp_path / "results"
    _grid(results / "headline", BOTH, RULE)
    demo = tmp_path / "demo"
    shape = Grid(presets=("mpsp-1l1h", "mpsp-2l2h"), task=TASK, train={"epochs": 400}, axes={"r": [0.5, 0.9]})
    _grid(demo, shape, {(p, r): 0 for p in shape.presets for r in (0.5, 0.9)})
    page = demo_report(demo, progress=False, results=results).read_text()
    h2 = re.findall(r"<h2>(.*?)</h2>", page)
    assert h2 == [
        "Study A's answer at CPU scale (committed results)",
        "A two-layer run at r = 0.9 that found the rule",
        "Your runs",
    ]
    first = page.index("<h2>")
    assert page.index("Not decided yet.") > first and page.index("Not decided yet.") < page.index("<h2>A two")
    mine = page[page.index("<h2>Your runs</h2>") :]
    assert re.findall(r"<h3>(.*?)</h3>", mine)[:3] == ["What was run", "Milestone rates", "Time to milestone"]
    assert "<h3>Outcomes</h3>" in mine and "<h3>Runs (4)</h3>" in mine
    for test in ("Preregistered tests", "Exploratory contrasts", "Fisher"):
        assert test not in mine, f"the demo's own runs show {test!r}"
    assert "p (one-sided Fisher)" in page[: page.index("<h2>Your runs</h2>")]  # the committed headline's
    assert not (demo / "tests.csv").exists() and (demo / "outcomes.csv").is_file()


def test_this_checkouts_answer_is_the_pages():
    """The committed headline read as docs/study_a.md states it; the decision follows the records."""
    text = _text(answer_section(RESULTS))
    assert "<b>The headline</b> (40 runs, all finished;" in text
    assert "points the study's way in both models and is significant in neither" in text
    primary = "primary test: one-sided Fisher p = 0.105; difference 0.30, 95% interval -0.04 to 0.60"
    page = re.sub(r"\s+", " ", (RESULTS.parents[1] / "docs" / "study_a.md").read_text())
    assert primary in text and primary in page
    assert "One layer reached the rule in 2 of 10 runs at r = 0.9 and 5 of 10 at r = 0.5" in text
    unfinished = [
        name
        for name in DECIDING
        if not (RESULTS / name).is_dir()
        or any(r.status != "finished" for r in load_results(RESULTS / name)[1])
    ]
    # The headline's two tests, and a finished decision grid's own (stage 1: primary and
    # secondary; stage 2: its primary), each with its 99% variant.
    tests = 2 + 2 * ("wd-headline" not in unfinished) + ("replication" not in unfinished)
    assert (
        text.count("<td>preregistered test</td>") == tests
        and text.count("<td>99% variant (robustness)</td>") == tests
    )
    stage_1 = study_a_decision(RESULTS)
    assert ("Not decided yet." in text) == (bool(unfinished) and not stage_1.decided)
    if stage_1.decided:  # the answer opens with stage 1's reading, then where the replication stands
        assert f"<b>The answer: {stage_1.outcome}.</b>" in text
        two = next(r for r in stage_1.tests if r.configuration == "mpsp-2l2h")
        p = fisher_exact(
            [[two.high[0], two.high[1] - two.high[0]], [two.low[0], two.low[1] - two.low[0]]], "greater"
        )
        assert (
            f"by its primary test on the weight-decay headline (below): two layers reached the rule in "
            f"{two.high[0]} of 10 runs at r = 0.9 and {two.low[0]} of 10 at r = 0.5, one-sided Fisher "
            f"p = {p.pvalue:.3g} (alpha 0.05)" in text
        )
        finished = sum(r.status == "finished" for r in load_results(RESULTS / "replication")[1])
        if "replication" in unfinished:
            assert (
                f"The replication at weight decay 0.1: {finished} of 60 runs finished; its test is read"
                in text
            )
        else:  # the replication's own reading, with its test
            stage_2 = replication(RESULTS)
            said = html.escape(f"{stage_2.outcome} ({'; '.join(stage_2.reasons)})")
            assert stage_2.decided and f"The replication at weight decay 0.1: {said}.</p>" in text


def test_the_demo_grid_is_four_cells_of_one_seed_at_its_chosen_epochs(tmp_path):
    grid = GRIDS["demo"]
    cells = {(s.tags["preset"], s.tags["r"]) for s in expand(grid, tmp_path)}
    assert cells == {(p, r) for p in ("mpsp-1l1h", "mpsp-2l2h") for r in (0.5, 0.9)} and grid.seeds == 1
    assert grid.task == {"shortcut": "first", "vocab": 32} and grid.train["epochs"] == DEMO_EPOCHS == 400


def test_the_demo_epochs_cover_every_early_rule_of_the_committed_two_layer_runs():
    """DEMO_EPOCHS's reason, from the records: two layers at r = 0.9, 32 values, weight decay 0.1."""
    steps = []
    for name in ("headline", "map", "crossed"):
        for run in load_results(RESULTS / name)[1]:
            if run.spec.tags.get("preset") == "mpsp-2l2h" and run.spec.tags.get("r") == 0.9:
                if run.spec.task["vocab"] == 32 and run.spec.train.get("weight_decay") == 0.1:
                    steps.append(run.milestones["rule"]["step"])
    assert len(steps) == 27
    early = [s for s in steps if s is not None and s <= 1000]
    late = sorted(s for s in steps if s is not None and s > 1000)
    assert len(early) == 7 and max(early) == 275 <= DEMO_EPOCHS and late == [1025, 2950]


def test_a_grid_named_like_a_deciding_one_at_another_weight_decay_gets_no_decision(tmp_path):
    """A user's own results may hold a ``wd-headline`` grid that is not the preregistered one: the
    report shows its progress and does not read the preregistered decision into it.
    """
    results = tmp_path / "results"
    _grid(results / "headline", BOTH, RULE)
    other = dataclasses.replace(BOTH, train={"epochs": 400, "weight_decay": 0.1})
    _grid(results / "wd-headline", other, RULE)
    with pytest.raises(ValueError, match="weight decay"):
        study_a_decision(results)
    text = _text(answer_section(results))
    assert "The answer:" not in text and "Not decided yet." in text
    assert "the weight-decay headline: 16 of 16 runs finished; the replication: not started" in text
