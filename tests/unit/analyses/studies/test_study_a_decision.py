"""Study A's preregistered readings (`analyses.studies.study_a.decision`) on hand-built run states,
one table per reading and per way of being incomplete, and on the committed records.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy.stats import hypergeom

from analyses.report.records import FINISHED, NOT_STARTED, UNFINISHED, RunState
from analyses.studies.study_a.decision import (
    IMBALANCE,
    INCOMPLETE,
    NOT_REPLICATED,
    READINGS,
    REPLICATED,
    RESULTS,
    UNDECIDED,
    WEIGHT_DECAY_NOT_IMBALANCE,
    decide,
    decision,
    replicate,
    replication,
)
from analyses.studies.study_a.stats import newcombe
from interp.sweep.specs import RunSpec


def run(
    preset: str, r: float, seed: int, rule: int | None, *, wd: float = 0.4, status: str = FINISHED
) -> RunState:
    """A run state of a study-A grid whose rule milestone is reached at `rule` (None: never)."""
    spec = RunSpec(Path(f"/nowhere/{preset}/{r}/{seed}"), {}, {"name": "mpsp"}, {"weight_decay": wd}, {})
    spec.tags.update({"preset": preset, "r": r, "seed": seed})
    milestones = {"rule": {"step": rule, "kept": rule is not None}}
    return RunState("stage", spec, status, 4000, {"val/acc": 0.9, "adv/acc": 0.1}, {}, milestones)


def cell(
    preset: str, r: float, reached: int, *, seeds: int = 10, step: int = 500, wd: float = 0.4
) -> list[RunState]:
    """`seeds` runs of one cell, the first `reached` of them reaching the rule at `step`."""
    return [run(preset, r, s, step if s < reached else None, wd=wd) for s in range(seeds)]


def stage_1(two_high: int, two_low: int, *, step: int = 500, one: tuple[int, int] = (2, 5)) -> list[RunState]:
    """A complete stage 1: the two-layer cells with the given counts, the one-layer cells with `one`."""
    return [
        *cell("mpsp-2l2h", 0.9, two_high, step=step),
        *cell("mpsp-2l2h", 0.5, two_low, step=step),
        *cell("mpsp-1l1h", 0.9, one[0]),
        *cell("mpsp-1l1h", 0.5, one[1]),
    ]


def test_a_missing_or_unfinished_run_leaves_it_incomplete_and_no_reading_is_made():
    complete = stage_1(9, 1)
    assert decide(complete).outcome == IMBALANCE
    # Every cell's seeds 0-3 only: the rest not exported yet.
    partial = [r for r in complete if r.spec.tags["seed"] < 4]
    found = decide(partial)
    assert (found.outcome, found.sentence(), found.decided) == (
        INCOMPLETE,
        "incomplete: 16 of 40 runs finished",
        False,
    )
    assert found.tests == ()
    # One run still training, or listed but not started, is missing as well.
    for status in (UNFINISHED, NOT_STARTED):
        last = complete[-1]
        runs = [*complete[:-1], RunState(last.sweep, last.spec, status, 100, {}, {}, {})]
        assert decide(runs).sentence() == "incomplete: 39 of 40 runs finished"


def test_reading_1_imbalance_helps_when_the_primary_test_is_significant():
    found = decide(stage_1(9, 1))
    primary, secondary = found.tests
    # One-sided Fisher: the chance of 9 or more of the 10 successes at r = 0.9, given 10 in all.
    assert primary.p_value == pytest.approx(hypergeom.sf(8, 20, 10, 10))
    assert found.outcome == IMBALANCE == READINGS[0] and primary.p_value < 0.05
    assert found.reasons[0].startswith(
        "mpsp-2l2h (primary test): the rule in 9 of 10 runs at r = 0.9 and 1 of 10"
    )
    assert found.reasons[1] == "p < 0.05" and secondary.configuration == "mpsp-1l1h"
    assert "secondary, not part of the reading: mpsp-1l1h" in found.reasons[-1]


def test_undecided_without_stage_2_when_the_interval_leaves_room_for_a_contrast_of_03():
    found = decide(stage_1(5, 3))
    primary = found.tests[0]
    assert primary.p_value >= 0.05 and primary.ci_high >= 0.3
    assert found.outcome == UNDECIDED and "reaches 0.3" in found.reasons[1]


def test_reading_2_waits_for_stage_2s_paired_seeds_then_reads_them_at_epoch_3000():
    stage = stage_1(10, 10)  # every run reaches the rule: the interval's upper end is below 0.3
    assert stage and decide(stage).tests[0].ci_high < 0.3
    waiting = decide(stage)
    assert waiting.outcome == INCOMPLETE and waiting.finished == waiting.expected == 40
    assert waiting.reasons[-1].endswith("seeds 0-9 at weight decay 0.1: 0 of 10 finished")
    # Stage 2's r = 0.5 seeds 0-9 at weight decay 0.1, none reaching the rule: 0.4 beats 0.1.
    replication = cell("mpsp-2l2h", 0.5, 0, wd=0.1)
    found = decide(stage, replication)
    low, _ = newcombe(10, 10, 0, 10)
    assert found.outcome == WEIGHT_DECAY_NOT_IMBALANCE and low > 0
    assert "the rule in 10 of 10 at weight decay 0.4 and 0 of 10 at 0.1" in found.reasons[-3]
    # Seeds 10-29 and the r = 0.9 cell of stage 2 do not enter this reading.
    assert decide(stage, replication + cell("mpsp-2l2h", 0.9, 30, seeds=30, wd=0.1)) == found
    # The same runs reaching the rule at epoch 3,500: in stage 1's test, not at epoch 3,000.
    late = decide(stage_1(10, 10, step=3500), replication)
    assert late.outcome == UNDECIDED and late.reasons[-2] == "its lower end is not above 0"
    assert "the rule in 0 of 10 at weight decay 0.4 and 0 of 10 at 0.1" in late.reasons[-3]


def test_the_replication_reads_its_own_primary_test():
    def stage_2(high: int, low: int) -> list[RunState]:
        return [
            *cell("mpsp-2l2h", 0.9, high, seeds=30, wd=0.1),
            *cell("mpsp-2l2h", 0.5, low, seeds=30, wd=0.1),
        ]

    found = replicate(stage_2(9, 0))
    assert found.outcome == REPLICATED and found.tests[0].p_value == pytest.approx(hypergeom.sf(8, 60, 9, 30))
    assert replicate(stage_2(3, 1)).outcome == NOT_REPLICATED
    assert replicate(stage_2(9, 0)[1:]).sentence() == "incomplete: 59 of 60 runs finished"


def test_a_run_at_another_weight_decay_is_refused_in_one_line():
    runs = stage_1(9, 1)
    runs[0] = run("mpsp-2l2h", 0.9, 0, 500, wd=0.1)
    with pytest.raises(ValueError, match=r"weight decay 0.1; the wd-headline grid was preregistered at 0.4$"):
        decide(runs)


def test_the_committed_records_give_a_reading_only_once_stage_1_has_finished():
    done = len(list((RESULTS / "wd-headline").rglob("DONE")))
    found = decision()
    assert found.finished == done and found.expected == 40
    assert (found.outcome == INCOMPLETE) == (done < 40)
    if done < 40:
        assert found.sentence() == f"incomplete: {done} of 40 runs finished"


def test_the_command_prints_both_readings_of_the_committed_records(capsys):
    from interp.cli import main

    with pytest.raises(SystemExit) as exit_code:
        main(["study-a", "decide"])
    out = capsys.readouterr().out.splitlines()
    assert exit_code.value.code == 0
    assert out == [
        f"weight decay or imbalance: {decision().sentence()}",
        f"replication: {replication().sentence()}",
    ]


def test_the_command_with_tables_prints_the_pages_robustness_and_signature_tables(capsys):
    from analyses.studies.study_a.decision import decision_runs
    from analyses.studies.study_a.onset_signature import signature_summary, signature_table
    from analyses.studies.study_a.robustness import robustness_table
    from interp.cli import main

    with pytest.raises(SystemExit) as exit_code:
        main(["study-a", "decide", "--tables"])
    out = capsys.readouterr().out
    assert exit_code.value.code == 0
    runs = decision_runs()
    assert {r.sweep for r in runs} == {"wd-headline", "replication"}
    planned = {stage: sum(r.sweep == stage for r in runs) for stage in ("wd-headline", "replication")}
    assert planned == {"wd-headline": 40, "replication": 60}  # every planned run, started or not
    robustness = robustness_table(runs).set_index(["sweep", "configuration"]).T.to_string()
    signature = signature_summary(signature_table(runs)).to_string(index=False)
    assert out.startswith(f"weight decay or imbalance: {decision().sentence()}\n")
    assert f"\n{robustness}\n" in out and out.endswith(f"\n{signature}\n")


def test_the_command_with_tables_says_when_no_run_has_finished(tmp_path, capsys):
    import shutil

    from interp.cli import main

    (tmp_path / "replication").mkdir()
    shutil.copy(RESULTS / "replication" / "sweep.json", tmp_path / "replication" / "sweep.json")
    with pytest.raises(SystemExit) as exit_code:
        main(["study-a", "decide", str(tmp_path), "--tables"])
    out = capsys.readouterr().out
    assert exit_code.value.code == 0
    assert out.endswith(f"no finished run of wd-headline/ or replication/ under {tmp_path} to describe yet\n")
