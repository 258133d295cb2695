"""Study A's preregistered statistics and the time-to-milestone curves, on hand-built run states.

Each number is checked against an independent computation: scipy's Wilson interval, the
hypergeometric tail for Fisher's exact test, Newcombe's own worked example, and a
Kaplan-Meier estimate worked out by hand.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from scipy.stats import binomtest, hypergeom

from analyses.report.records import DIVERGED, FINISHED, NOT_STARTED, UNFINISHED, RunState, wilson
from analyses.report.survival import time_to_milestone, time_to_milestone_figure, wilson_interval
from analyses.studies.study_a.stats import (
    OUTCOMES,
    axis_rate_figure,
    axis_rates,
    contrast_tests,
    headline_vocabulary,
    newcombe,
    outcome,
    outcome_table,
    report_tests,
)
from interp.sweep.specs import RunSpec


def state(
    preset: str = "mpsp-2l2h",
    r: float = 0.9,
    *,
    seed: int = 0,
    rule: int | None = None,
    kept: bool = True,
    memorized: int | None = None,
    val: float = 0.9,
    adv: float = 0.1,
    epoch: int = 1500,
    status: str = FINISHED,
    sweep: str = "grid",
    **coords: float,
) -> RunState:
    """A run state with the given milestones and final accuracies (nothing on disk)."""
    spec = RunSpec(
        Path(f"/nowhere/{preset}/{r}/{seed}"),
        {},
        {"name": "mpsp"},
        {},
        {"preset": preset, **coords, "r": r, "seed": seed},
    )
    milestones = {
        "rule": {"step": rule, "kept": kept if rule is not None else False},
        "rule-99": {"step": rule, "kept": kept if rule is not None else False},
        "memorized": {"step": memorized, "kept": memorized is not None},
    }
    final = {"step": epoch, "val/acc": val, "adv/acc": adv}
    return RunState(sweep, spec, status, epoch, final, {}, milestones)


def test_outcomes_are_exclusive_and_in_the_preregistered_order():
    assert outcome(state(rule=300, memorized=200)) == "rule kept"
    assert outcome(state(rule=300, kept=False, memorized=200)) == "rule transient"
    assert outcome(state(memorized=200)) == "memorised without the rule"
    assert outcome(state(val=0.05, adv=0.97)) == "inverted shortcut"
    assert outcome(state(val=0.95, adv=0.03)) == "shortcut only"
    assert outcome(state(val=0.5, adv=0.5)) == "other"
    table = outcome_table(
        [state(seed=0, rule=3), state(seed=1, memorized=2), state(seed=2, status=UNFINISHED)]
    )
    row = table.iloc[0]
    assert row["finished"] == 2 and row["rule kept"] == 1 and row["memorised without the rule"] == 1
    assert sum(row[name] for name in OUTCOMES) == row["finished"]


def test_newcombe_matches_the_worked_example_of_the_paper():
    # Newcombe (1998), method 10, example (a): 56/70 - 48/80 = 0.2000, interval 0.0524 to 0.3339.
    low, high = newcombe(56, 70, 48, 80)
    assert low == pytest.approx(0.0524, abs=5e-4)
    assert high == pytest.approx(0.3339, abs=5e-4)


def test_contrast_tests_use_the_preregistered_directions_and_fisher_exact():
    runs = [state("mpsp-2l2h", 0.9, seed=s, rule=300 if s < 7 else None) for s in range(10)]
    runs += [state("mpsp-2l2h", 0.5, seed=s) for s in range(10)]
    runs += [state("mpsp-1l1h", 0.9, seed=s) for s in range(10)]
    runs += [state("mpsp-1l1h", 0.5, seed=s, rule=500 if s < 3 else None) for s in range(10)]
    tests = {t.role: t for t in contrast_tests(runs)}
    primary, secondary = tests["primary"], tests["secondary"]
    assert (primary.high, primary.low, primary.alternative) == ((7, 10), (0, 10), "greater")
    # One-sided Fisher: P(at least 7 of the 7 rule runs fall in the r = 0.9 cell of 10, out of 20).
    assert primary.p_value == pytest.approx(hypergeom.sf(6, 20, 7, 10))
    assert (secondary.high, secondary.low, secondary.alternative) == ((0, 10), (3, 10), "less")
    assert secondary.p_value == pytest.approx(hypergeom.cdf(0, 20, 3, 10))
    assert (primary.ci_low, primary.ci_high) == pytest.approx(newcombe(7, 10, 0, 10))
    # A preregistered sweep's contrasts are tests; its 99% variant is their robustness reading;
    # the same contrast in any other folder is exploratory and names no test.
    assert primary.row()["test"] == "-" and primary.row()["reading"] == "exploratory contrast"
    headline = contrast_tests([replace(run, sweep="headline") for run in runs])
    assert {t.row()["test"] for t in headline} == {"primary", "secondary"}


def test_the_report_labels_preregistered_tests_their_99_percent_variants_and_exploratory_contrasts():
    runs = []
    for sweep in ("wd-headline", "map"):
        runs += [state("mpsp-2l2h", 0.9, seed=s, rule=300, sweep=sweep) for s in range(3)]
        runs += [state("mpsp-2l2h", 0.5, seed=s, sweep=sweep) for s in range(3)]
    rows = [t.row() for t in report_tests(runs)]
    readings = [(r["sweep"], r["milestone"], r["reading"], r["test"]) for r in rows]
    assert readings == [
        ("wd-headline", "rule", "preregistered test", "primary"),
        ("map", "rule", "exploratory contrast", "-"),
        ("wd-headline", "rule-99", "99% variant (robustness)", "primary"),
    ]


def test_unfinished_runs_are_not_counted_in_a_test():
    runs = [state("mpsp-2l2h", 0.9, seed=0, rule=100), state("mpsp-2l2h", 0.9, seed=1, status=UNFINISHED)]
    runs += [state("mpsp-2l2h", 0.5, seed=0)]
    (test,) = contrast_tests(runs)
    assert test.high == (1, 1) and test.low == (0, 1)
    assert (
        test.unfinished == 1 and test.row()["reading"] == "exploratory contrast"
    )  # not a preregistered sweep


def test_a_preregistered_test_with_runs_still_to_finish_says_it_is_incomplete():
    runs = [
        state("mpsp-2l2h", 0.9, seed=0, rule=100, sweep="replication"),
        state("mpsp-2l2h", 0.9, seed=1, status=UNFINISHED, sweep="replication"),
        state("mpsp-2l2h", 0.5, seed=0, sweep="replication"),
        state("mpsp-2l2h", 0.5, seed=1, status=NOT_STARTED, sweep="replication"),
        state("mpsp-2l2h", 0.5, seed=2, status=DIVERGED, sweep="replication"),  # over: not unfinished
    ]
    (test,) = contrast_tests(runs)
    assert (test.high, test.low) == ((1, 1), (0, 1))
    assert test.row()["reading"] == "preregistered test, incomplete (2 unfinished)"
    done = [replace(r, status=FINISHED) if r.status in (UNFINISHED, NOT_STARTED) else r for r in runs]
    assert contrast_tests(done)[0].row()["reading"] == "preregistered test"


def test_axis_rates_draw_one_line_per_r():
    runs = [
        state(r=r, vocab=v, seed=s, rule=100 if (r == 0.9 and s < v // 16) else None)
        for v in (16, 32, 48)
        for r in (0.9, 0.5)
        for s in range(3)
    ]
    table = axis_rates(runs, "vocab")
    row = table[(table["vocab"] == 32) & (table["line"] == "mpsp-2l2h, r = 0.9")].iloc[0]
    assert (row["reached"], row["finished"]) == (2, 3)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson(2, 3))
    fig = axis_rate_figure(runs)
    assert {t.name for t in fig.data} == {"mpsp-2l2h, r = 0.9", "mpsp-2l2h, r = 0.5"}
    assert list(fig.data[0].x) == [16, 32, 48]


def _map(rules: dict[tuple[int, float], int], seeds: int = 5) -> list[RunState]:
    """A complete map whose cell (vocab, r) has its first `rules[vocab, r]` seeds reach the rule."""
    return [
        state(r=r, vocab=v, seed=s, rule=200 if s < reached else None)
        for (v, r), reached in rules.items()
        for s in range(seeds)
    ]


def test_headline_vocabulary_takes_the_largest_difference_ties_to_the_larger_vocabulary():
    rules = {(16, 0.9): 5, (16, 0.5): 5, (24, 0.9): 3, (24, 0.5): 1, (32, 0.9): 2, (32, 0.5): 0}
    rules |= {(48, 0.9): 0, (48, 0.5): 0}
    v_star, table = headline_vocabulary(_map(rules))
    assert v_star == 32  # 24 and 32 both differ by 2/5: the larger wins
    assert table.set_index("vocab")["difference"].to_dict() == pytest.approx({16: 0, 24: 0.4, 32: 0.4, 48: 0})
    assert table.set_index("vocab").loc[24, "r = 0.9"] == "3/5"
    # With no positive difference it still picks one: where the contrast is least absent.
    v_star, _ = headline_vocabulary(_map({(16, 0.9): 1, (16, 0.5): 2, (24, 0.9): 0, (24, 0.5): 3}))
    assert v_star == 16


def test_headline_vocabulary_refuses_an_incomplete_map():
    runs = _map({(16, 0.9): 1, (16, 0.5): 0})
    runs[0] = state(r=0.9, vocab=16, seed=0, status=UNFINISHED)
    with pytest.raises(ValueError, match="not complete: 1 of 10"):
        headline_vocabulary(runs)
    with pytest.raises(ValueError, match="vocab 16 has r = \\[0.9\\]"):
        headline_vocabulary(_map({(16, 0.9): 1}))


@pytest.mark.parametrize("k, n", [(0, 10), (3, 10), (7, 10), (10, 10), (1, 3)])
def test_wilson_interval_equals_scipys_on_whole_counts(k, n):
    expected = binomtest(k, n).proportion_ci(method="wilson")
    assert wilson_interval(k / n, n) == pytest.approx((expected.low, expected.high))


def test_time_to_milestone_without_censoring_is_the_plain_fraction():
    runs = [state(seed=s, rule=step) for s, step in enumerate([100, 300, None, 300, None])]
    curve = time_to_milestone(runs, "rule")
    assert curve.steps == [0, 100, 300, 1500]
    assert curve.fraction == pytest.approx([0, 0.2, 0.6, 0.6])
    assert (curve.low[2], curve.high[2]) == pytest.approx(wilson(3, 5))
    assert (curve.runs, curve.reached) == (5, 3)


def test_time_to_milestone_censors_unfinished_runs_kaplan_meier():
    # Reached at 10; unfinished at 20 without it; reached at 30; finished at 40 without it.
    runs = [
        state(seed=0, rule=10),
        state(seed=1, epoch=20, status=UNFINISHED),
        state(seed=2, rule=30),
        state(seed=3, epoch=40),
    ]
    curve = time_to_milestone(runs, "rule")
    assert curve.steps == [0, 10, 20, 30, 40]
    # S(10) = 3/4; the run censored at 20 leaves 2 at risk; S(30) = 3/4 * 1/2.
    assert curve.fraction == pytest.approx([0, 0.25, 0.25, 0.625, 0.625])
    assert curve.observed == [4, 4, 4, 3, 3]
    fig = time_to_milestone_figure(runs)
    shown = [t for t in fig.data if t.visible is not False and t.showlegend is not False]
    assert len(shown) == 1 and list(shown[0].y) == pytest.approx([0, 25, 25, 62.5, 62.5])
    assert "Time to rule" in fig.layout.title.text


def test_crossed_outcomes_lay_the_runs_out_by_training_set_and_initialisation():
    from analyses.studies.study_a.stats import crossed_outcomes

    runs = [
        state(
            seed=m, data=d, rule=100 if d == 1 else None, status=UNFINISHED if (d, m) == (1, 2) else FINISHED
        )
        for d in range(2)
        for m in range(3)
    ]
    table = crossed_outcomes(runs)
    assert (table.index.name, table.columns.name) == ("training set", "initialisation")
    assert table.loc[0].tolist() == ["shortcut only"] * 3  # val 0.9, adv 0.1, no milestone
    assert table.loc[1].tolist() == ["rule kept", "rule kept", "not finished"]
    assert crossed_outcomes([state(seed=0)]).empty  # no crossed runs: nothing to lay out


def test_crossed_shares_split_the_variation_between_data_and_initialisation():
    """4 training sets x 3 initialisations: the rule on training sets 0 and 1 whatever the
    initialisation (all the variation is the data's); then on initialisation 0 only (all of it
    the initialisation's); then one lucky pair (an interaction neither explains alone).
    """
    from analyses.studies.study_a.stats import crossed_shares

    def runs(found):
        return [state(seed=m, data=d, rule=100 if found(d, m) else None) for d in range(4) for m in range(3)]

    row = crossed_shares(runs(lambda d, m: d < 2)).iloc[0]
    assert (row["share: data"], row["share: initialisation"], row["rate"]) == pytest.approx((1.0, 0.0, 0.5))
    # Of the C(12, 6) = 924 placements of 6 successes, only the C(4, 2) = 6 that fill two whole
    # training sets explain everything by the data; every placement has an initialisation share >= 0.
    assert (row["p: data"], row["p: initialisation"]) == pytest.approx((6 / 924, 1.0))
    row = crossed_shares(runs(lambda d, m: m == 0)).iloc[0]
    assert (row["share: data"], row["share: initialisation"]) == pytest.approx((0.0, 1.0))
    # 4 successes filling one initialisation: 3 of the C(12, 4) = 495 placements do.
    assert row["p: initialisation"] == pytest.approx(3 / 495)
    row = crossed_shares(runs(lambda d, m: (d, m) == (2, 1))).iloc[0]
    # y = 1 in one cell of 12: total SS = 11/12; data: 3 * (3 * (0 - 1/12)^2 + (1/3 - 1/12)^2) = 1/4.
    assert row["share: data"] == pytest.approx((1 / 4) / (11 / 12))
    assert row["share: initialisation"] == pytest.approx(
        (4 * (2 * (1 / 12) ** 2 + (1 / 4 - 1 / 12) ** 2)) / (11 / 12)
    )
    # One success: each placement is some single cell, and every one has the same shares.
    assert (row["p: data"], row["p: initialisation"]) == pytest.approx((1.0, 1.0))
    incomplete = crossed_shares(runs(lambda d, m: d < 2)[:-1])
    assert incomplete.iloc[0]["share: data"] is None and incomplete.iloc[0]["p: data"] is None
