"""Numbers in docs/study_a.md's prose, each read back from the committed records under
results/study-a/ (the numbers its code cells print are computed there, and the mechanism cell
asserts its own). A page whose number differs from its record fails here. The log
(docs/study_a_log.md) keeps its notes as they were written and is not checked here.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from scipy.stats import binom, binomtest, fisher_exact

from analyses.report.records import load_results
from analyses.studies.study_a.decision import REPLICATED, decision, decision_runs, replication
from analyses.studies.study_a.onset_signature import signature_table
from analyses.studies.study_a.stats import contrast_tests, crossed_shares, newcombe
from interp.store import list_checkpoints
from interp.store.run_folder import read_metrics

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results" / "study-a"
PAGE = (ROOT / "docs" / "study_a.md").read_text()


def _prose() -> str:
    """The page without its code cells and bold marks, its lines joined (a number may wrap)."""
    text = re.sub(r"```.*?```", "", PAGE, flags=re.DOTALL).replace("**", "")
    return re.sub(r"\s+", " ", text)


def _done(run: Path) -> dict:
    return json.loads((run / "DONE").read_text())


def _steps(runs: list[Path], milestone: str) -> list[int]:
    return [_done(r)["milestones"][milestone]["step"] for r in runs]


def test_weight_decay_04_memorised_first_then_found_the_rule_at_the_stated_epochs():
    # The three runs that memorised without the rule at weight decay 0.1 (headline seeds 1, 2, 4).
    headline = RESULTS / "headline" / "mpsp-2l2h" / "r=0.9"
    late = [s for s in range(5) if _done(headline / f"seed_{s}")["milestones"]["rule"]["step"] is None]
    runs = [RESULTS / "wd" / "mpsp-2l2h" / "r=0.9" / f"seed_{s}" for s in late]
    memorised, rule = _steps(runs, "memorized"), _steps(runs, "rule")
    assert len(runs) == 3 and all(m < r for m, r in zip(memorised, rule))
    stated = (
        f"memorised the opposing examples first (at epochs {min(memorised)}-{max(memorised)}) and "
        f"reached the rule much later (at epochs {min(rule):,}-{max(rule):,})"
    )
    assert stated in _prose()


def test_one_layer_at_r_05_sat_at_chance_but_for_one_run_at_the_99_percent_rule():
    runs = sorted((RESULTS / "map-1l1h" / "mpsp-1l1h").glob("vocab=*/r=0.5/seed_*"))
    missed = [r for r in runs if _done(r)["milestones"]["rule"]["step"] is None]
    chance = [r for r in missed if max(_done(r)["final"]["val/acc"], _done(r)["final"]["adv/acc"]) < 0.6]
    (other,) = set(missed) - set(chance)
    assert (len(runs), len(missed), len(chance)) == (20, 12, 11)
    step99 = _done(other)["milestones"]["rule-99"]["step"]
    vocab, seed = other.parts[-3].split("=")[1], other.name.split("_")[1]
    stated = (
        f"at r = 0.5, {len(chance)} of {len(missed)} sat at chance on val and adv; the twelfth (vocabulary "
        f"{vocab}, seed index {seed}) reached the rule's 99% variant at epoch {step99} and never the rule itself"
    )
    assert stated in _prose()


@pytest.mark.parametrize("r, stated", [(0.9, "7 of 20 at r = 0.9"), (0.5, "8 of 20 at r = 0.5")])
def test_the_one_layer_map_rates_the_page_quotes(r, stated):
    runs = sorted((RESULTS / "map-1l1h" / "mpsp-1l1h").glob(f"vocab=*/r={r}/seed_*"))
    found = sum(_done(run)["milestones"]["rule"]["step"] is not None for run in runs)
    assert f"{found} of {len(runs)} at r = {r}" == stated and stated in _prose()


def _cell(grid: str, preset: str, r: float) -> list[Path]:
    return sorted((RESULTS / grid / preset / f"r={r}").glob("seed_*"))


def _reached(runs: list[Path], milestone: str = "rule") -> int:
    return sum(_done(r)["milestones"][milestone]["step"] is not None for r in runs)


def _tests(grid: str, milestone: str = "rule") -> dict:
    return {t.configuration: t for t in contrast_tests(load_results(RESULTS / grid)[1], milestone)}


def _power(high: float, low: float, alternative: str, n: int = 10) -> float:
    """Exact power of the one-sided Fisher test at alpha 0.05, n runs a cell, by enumerating both binomials."""
    return sum(
        binom.pmf(k1, n, high) * binom.pmf(k2, n, low)
        for k1 in range(n + 1)
        for k2 in range(n + 1)
        if fisher_exact([[k1, n - k1], [k2, n - k2]], alternative=alternative).pvalue < 0.05
    )


def test_the_answer_states_the_headlines_two_tests():
    tests = _tests("headline")
    two, one = tests["mpsp-2l2h"], tests["mpsp-1l1h"]
    stated = (
        f"Two layers reached the rule in {two.high[0]} of {two.high[1]} runs at r = 0.9 and {two.low[0]} of "
        f"{two.low[1]} at r = 0.5 (primary test: one-sided Fisher p = {two.p_value:.3g}; difference "
        f"{two.difference:.2f}, 95% interval {two.ci_low:.2f} to {two.ci_high:.2f}); one layer in "
        f"{one.high[0]} of {one.high[1]} and {one.low[0]} of {one.low[1]} (secondary test: p = "
        f"{one.p_value:.3g}; difference {one.difference:.2f}, 95% interval {one.ci_low:.2f} to {one.ci_high:.2f})"
    )
    assert stated in _prose()
    assert "10 seeds a cell left it significant in neither model" in _prose()
    assert two.p_value >= 0.05 and one.p_value >= 0.05


def test_the_results_state_weight_decay_04s_pairs():
    wd, headline = _cell("wd", "mpsp-2l2h", 0.9), _cell("headline", "mpsp-2l2h", 0.9)[:5]
    k4, k1, n = _reached(wd), _reached(headline), len(wd)
    assert n == 5 and all(_done(r)["milestones"]["rule"]["kept"] for r in wd)  # "kept it to the end"
    prose = _prose()
    low, high = newcombe(k4, n, k1, n)
    assert (
        f"{k4} of {n} against {k1} of {n}, a difference of {(k4 - k1) / n:+.2f} "
        f"(Newcombe 95% interval {low:+.2f} to {high:+.2f})" in prose
    )
    changed = sum(_done(a)["milestones"]["rule"]["step"] is None for a in headline)  # all of them gained it
    assert (
        f"{changed} of {changed} changed pairs moved the same way, an exact sign test "
        f"p = {binomtest(changed, changed).pvalue:.2f}" in prose
    )
    assert f"stage (b)'s {n} runs at 0.4 kept it to the end" in prose


def test_the_maps_counts_and_its_choice():
    def counts(vocab: int) -> tuple[int, int]:
        return tuple(
            _reached(sorted((RESULTS / "map" / "mpsp-2l2h" / f"vocab={vocab}" / f"r={r}").glob("seed_*")))
            for r in (0.9, 0.5)
        )

    (a, b), (c, d) = counts(16), counts(32)
    assert f"At 16 values both ratios found the rule ({a} of 5 at r = 0.9, {b} of 5 at r = 0.5" in _prose()
    assert counts(24) == counts(48) == (0, 0) and "at 24 and 48 values no run did" in _prose()
    assert f"at 32 values {c} of 5 at r = 0.9 and {d} of 5 at r = 0.5 did" in _prose()


def test_the_headlines_two_layer_bullet():
    two = _tests("headline")["mpsp-2l2h"]
    prose = _prose()
    assert (
        f"The rule in {two.high[0]} of 10 runs at r = 0.9 and {two.low[0]} of 10 at r = 0.5 (p = {two.p_value:.3g})"
        in prose
    )
    assert two.ci_low < 0 < 0.77 > two.ci_high and "excludes the study's own difference (0.77)" in prose
    runs = _cell("headline", "mpsp-2l2h", 0.9) + _cell("headline", "mpsp-2l2h", 0.5)
    missed = [r for r in runs if _done(r)["milestones"]["rule"]["step"] is None]
    assert all(
        _done(r)["milestones"]["memorized"]["step"] is not None for r in missed
    )  # "memorised its training set"
    low = [_done(r)["final"] for r in _cell("headline", "mpsp-2l2h", 0.5)]
    assert all(0.4 < f[k] < 0.6 for f in low for k in ("val/acc", "adv/acc"))  # "at chance on val and adv"
    late = _done(RESULTS / "headline" / "mpsp-2l2h" / "r=0.9" / "seed_2")
    assert late["milestones"]["rule"]["step"] is None
    assert (
        f"One r = 0.9 run (seed index 2) began a late second phase and ended at adv {late['final']['adv/acc']:.3f}"
        in prose
    )
    adv = [
        m["adv/acc"]
        for m in read_metrics(RESULTS / "headline" / "mpsp-2l2h" / "r=0.9" / "seed_2")
        if "adv/acc" in m
    ]
    assert adv[-1] == max(adv) and adv[-1] > adv[-5] and ", still rising" in prose


def test_the_headlines_one_layer_bullet_and_the_powers_the_page_quotes():
    one = _tests("headline")["mpsp-1l1h"]
    prose = _prose()
    assert (
        f"The rule in {one.high[0]} of 10 at r = 0.9 and {one.low[0]} of 10 at r = 0.5 (p = {one.p_value:.3g})"
        in prose
    )
    assert f"the {100 * one.high[0] // one.high[1]}% at r = 0.9 is what disagrees" in prose
    # The preregistered powers: the secondary against the study's 0% and 33%, the primary
    # against the two-layer rates the headline found (30% and 0%).
    assert f"a power of only {_power(0.0, 0.33, 'less'):.2f} against the study's rates" in prose
    two = _tests("headline")["mpsp-2l2h"]
    primary = _power(two.high[0] / two.high[1], two.low[0] / two.low[1], "greater")
    assert f"about {primary:.2f} power against the rates the headline found" in prose
    assert f"the secondary {_power(0.0, 0.33, 'less'):.2f} against the study's" in prose


def test_the_99_percent_variants_change_no_tests_direction():
    strict, loose = _tests("headline"), _tests("headline", "rule-99")
    (secondary,) = [t for t in loose.values() if t.role == "secondary"]
    stated = (
        f"at 99% the headline's secondary test reads {secondary.high[0]} of {secondary.high[1]} against "
        f"{secondary.low[0]} of {secondary.low[1]}, p = {secondary.p_value:.3f}"
    )
    assert stated in _prose()
    assert all((strict[m].difference > 0) == (loose[m].difference > 0) for m in strict)
    assert "change no test's direction" in _prose()


def test_the_crossed_designs_counts_and_shares():
    runs = load_results(RESULTS / "crossed")[1]
    (row,) = crossed_shares(runs).to_dict("records")
    found = round(row["rate"] * row["runs"])
    stated = (
        f"{found} of {row['runs']} crossed runs found the rule. The initialisation explains a share of "
        f"{row['share: initialisation']:.2f} of the variation, the training set {row['share: data']:.2f} "
        f"(exact permutation p = {row['p: initialisation']:.2f} and {row['p: data']:.2f}"
    )
    assert stated in _prose()
    (loose,) = crossed_shares(runs, "rule-99").to_dict("records")
    stated = (
        f"At its 99% variant {round(loose['rate'] * loose['runs'])} of {loose['runs']} reached it and the "
        f"initialisation's share rises to {loose['share: initialisation']:.2f} (p = {loose['p: initialisation']:.3f}; "
        f"the training set {loose['share: data']:.2f}, p = {loose['p: data']:.2f})"
    )
    assert loose["share: initialisation"] > row["share: initialisation"] and stated in _prose()


def test_below_chance_and_capacity():
    prose = _prose()
    below = {p: _cell("below-chance", p, 0.15) for p in ("mpsp-2l2h", "mpsp-1l1h")}
    assert {_reached(r) for r in below.values()} == {3} and all(len(r) == 5 for r in below.values())
    assert "both found the rule in 3 of 5 runs at r = 0.15" in prose
    missed = [
        _done(r)["final"]
        for runs in below.values()
        for r in runs
        if _done(r)["milestones"]["rule"]["step"] is None
    ]
    assert missed and all(
        f["val/acc"] <= 0.2 and f["adv/acc"] >= 0.8 for f in missed
    )  # the inverted shortcut
    high, low = (_reached(_cell("capacity", "mpsp-2l1h", r)) for r in (0.9, 0.5))
    assert (
        f"Two layers with one head found the rule in {high} of 5 at r = 0.9 and {low} of 5 at r = 0.5"
        in prose
    )
    one = _cell("capacity", "mpsp-1l2h", 0.9) + _cell("capacity", "mpsp-1l2h", 0.5)
    assert (
        f"one layer with two heads never did ({_reached(one)} of {len(one)})" in prose and _reached(one) == 0
    )
    assert all(_done(r)["final"]["train/acc"] < 1 for r in one)  # "never fitted its training set"


def test_what_agrees_and_what_does_not():
    tests = _tests("headline")
    two, one = tests["mpsp-2l2h"], tests["mpsp-1l1h"]
    prose = _prose()
    assert f"helped two layers ({two.difference:+.2f}) and hurt one layer ({one.difference:+.2f})" in prose
    assert f"found the rule in {100 * two.high[0] // two.high[1]}% of runs against the study's 77%" in prose
    assert f"{100 * one.high[0] // one.high[1]}% at r = 0.9 in the headline where the study has 0%" in prose


def _stage(name: str) -> list:
    """One decision grid's runs (``wd-headline`` is stage 1, ``replication`` stage 2), named by it."""
    return [run for run in decision_runs(RESULTS) if run.sweep == name]


def test_the_answer_states_the_decisions_stage_1():
    assert decision(RESULTS).outcome == "imbalance helps at weight decay 0.4"
    high, low = _cell("wd-headline", "mpsp-2l2h", 0.9), _cell("wd-headline", "mpsp-2l2h", 0.5)
    kept = sum(_done(r)["milestones"]["rule"]["kept"] for r in high)
    epochs = {_done(r)["epochs"] for r in high + low}
    assert len(epochs) == 1 and _reached(low) == 0  # "weight decay alone does not"
    prose = _prose()
    assert "Imbalance helps two layers, and weight decay alone does not" in prose
    assert (
        f"Two layers found the rule in {_reached(high)} of {len(high)} runs at r = 0.9 and kept it to "
        f"epoch {epochs.pop():,} in {kept} of {len(high)}; at r = 0.5 all {len(low)} memorised" in prose
    )
    assert all(_done(r)["milestones"]["memorized"]["step"] is not None for r in low)
    assert all(0.4 < _done(r)["final"][k] < 0.6 for r in low for k in ("val/acc", "adv/acc"))  # "at chance"
    one = _tests("wd-headline")["mpsp-1l1h"]
    assert (
        f"at 0.4 it found the rule in {one.high[0]} of {one.high[1]} runs at r = 0.9 and {one.low[0]} of "
        f"{one.low[1]} at r = 0.5 (p = {one.p_value:.3g})" in prose
    )
    # "What agrees": the same kept count, and one layer's at r = 0.9.
    assert f"two-layer runs at r = 0.9 kept it to epoch 4,000 in {kept} of {len(high)}" in prose
    found = [
        r
        for r in _cell("wd-headline", "mpsp-1l1h", 0.9)
        if _done(r)["milestones"]["rule"]["step"] is not None
    ]
    one_kept = sum(_done(r)["milestones"]["rule"]["kept"] for r in found)
    assert f"it kept the rule in {one_kept} of the {len(found)} runs that found it" in prose


def test_stage_1s_times_to_the_rule_and_its_99_percent_variants():
    high = _cell("wd-headline", "mpsp-2l2h", 0.9)
    steps = _steps(high, "rule")
    assert max(steps) <= 3000  # "all of them by epoch 3,000"
    assert (
        f"found the rule between epochs {min(steps):,} and {max(steps):,}, all of them by epoch 3,000"
        in _prose()
    )
    strict, loose = _tests("wd-headline"), _tests("wd-headline", "rule-99")
    two = strict["mpsp-2l2h"], loose["mpsp-2l2h"]
    assert two[0].high == two[1].high and two[0].low == two[1].low
    assert "the 99% variants agree with the 100% rule in both two-layer cells" in _prose()


def test_stage_1s_gradient_signature_as_described():
    table = signature_table(_stage("wd-headline"))
    two = table[(table.preset == "mpsp-2l2h") & (table.r == 0.9)]
    one = table[(table.preset == "mpsp-1l1h") & table.onset.notna()]
    assert two.onset.notna().all() and two.outcome.str.startswith("rule").all()
    before, conflict = int(two.signature.sum()), int((two["cos during (max)"] < 0).sum())
    assert not one.signature.any() and table["signature anywhere"].all()
    prose = _prose()
    assert (
        f"the signature came before the rule in {before} of the {len(two)} two-layer runs at r = 0.9 that "
        f"found it and in none of the {len(one)} one-layer runs with a second phase" in prose
    )
    assert f"happened somewhere in every one of its {len(table)} runs" in prose
    assert (
        f"stayed in conflict (highest cosine below 0) in {conflict} of those {len(two)} two-layer runs"
        in prose
    )


def test_the_docs_home_page_states_both_stages_counts():
    two, again = _tests("wd-headline")["mpsp-2l2h"], _tests("replication")["mpsp-2l2h"]
    home = re.sub(r"\s+", " ", (ROOT / "docs" / "index.md").read_text())
    assert two.p_value < 0.05  # "significantly"
    assert (
        f"found the rule in {two.high[0]} of {two.high[1]} runs at r = 0.9 and {two.low[0]} of {two.low[1]} at "
        f"r = 0.5" in home
    )
    assert again.p_value < 0.05  # "replicated it"
    assert (
        f"and {again.high[1]} fresh seeds a cell replicated it ({again.high[0]} of {again.high[1]} against "
        f"{again.low[0]} of {again.low[1]}, p = {again.p_value:.3g})" in home
    )


_WORDS = {1: "one", 2: "two", 3: "three"}


def test_the_answer_states_stage_2s_reading():
    reading = replication(RESULTS)
    assert reading.decided, reading.sentence()  # every run of stage 2 has finished
    (strict,) = reading.tests
    loose = _tests("replication", "rule-99")["mpsp-2l2h"]
    assert reading.outcome == REPLICATED
    (k, n), (j, m) = strict.high, strict.low
    kept = sum(_done(r)["milestones"]["rule"]["kept"] for r in _cell("replication", "mpsp-2l2h", 0.9))
    one_fewer = fisher_exact([[k - 1, n - k + 1], [j, m - j]], alternative="greater").pvalue
    assert one_fewer >= 0.05  # "with no run to spare"
    prose = _prose()
    assert (
        f"Stage 2 of the decision, the two-layer contrast again with {n} fresh seeds a cell, replicated it: "
        f"{k} of {n} runs at r = 0.9 and {j} of {m} at r = 0.5 (p = {strict.p_value:.3g}; difference "
        f"{strict.difference:.2f}, 95% interval {strict.ci_low:.2f} to {strict.ci_high:.2f}), with no run to "
        f"spare: {k - 1} of {n} at r = 0.9 would have missed alpha 0.05 (p = {one_fewer:.3g}), and "
        f"{_WORDS[k - kept]} of the {k} lost the rule before the end" in prose
    )
    assert (
        "At the 99% rule, a robustness reading beside the test, it "
        f"reads {loose.high[0]} of {loose.high[1]} against {loose.low[0]} of {loose.low[1]}:" in prose
    )
    # "What agrees" and "the size" say the same.
    assert (
        "At 0.4 in the decision's stage 1, and at the headline's 0.1 in stage 2, with 30 seeds a cell"
        in prose
    )
    assert strict.ci_high < 0.77 and f"excludes the study's; stage 2 found it in {100 * k / n:.0f}%." in prose


def test_stage_2s_near_misses_and_its_runs_at_r_05():
    """How close the runs between the 99% and the 100% rule came: the fewest adversarial examples
    wrong at an evaluation with every val example right; and the best adv accuracy at r = 0.5.
    """
    high, low = _cell("replication", "mpsp-2l2h", 0.9), _cell("replication", "mpsp-2l2h", 0.5)
    near = [
        r
        for r in high
        if _done(r)["milestones"]["rule"]["step"] is None
        and _done(r)["milestones"]["rule-99"]["step"] is not None
    ]
    n_adv = _config(high[0])["task"]["n_adv"]
    fewest = [
        min(round((1 - m["adv/acc"]) * n_adv) for m in read_metrics(r) if m.get("val/acc") == 1.0)
        for r in near
    ]
    best = max(m["adv/acc"] for r in low for m in read_metrics(r) if "adv/acc" in m)
    assert (
        f"the {len(near)} runs at r = 0.9 that reached it and not the rule came within {min(fewest)} to "
        f"{max(fewest)} of the {n_adv:,} adversarial examples of the rule, while no run at r = 0.5 got more "
        f"than {math.ceil(100 * best)}% of them right" in _prose()
    )


def test_stage_2s_gradient_signature_as_described():
    table = signature_table(_stage("replication"))
    high, low = table[table.r == 0.9], table[table.r == 0.5]
    found = high[high.outcome.str.startswith("rule")]
    short = high[high.onset.notna() & ~high.outcome.str.startswith("rule")]
    assert found.onset.notna().all() and not low.outcome.str.startswith("rule").any()
    assert low["signature anywhere"].all()
    assert (
        f"the signature came before the second phase in {int(found.signature.sum())} of the {len(found)} runs "
        f"at r = 0.9 that found the rule and in {int(short.signature.sum())} of the {len(short)} whose second "
        f"phase stopped short of it, and the sequence happened somewhere in "
        f"{int(high['signature anywhere'].sum())} of the {len(high)} runs at r = 0.9 and in all {len(low)} at "
        "r = 0.5, none of which found the rule" in _prose()
    )


def test_stage_2s_power_as_the_page_quotes():
    headline, strict = _tests("headline")["mpsp-2l2h"], _tests("replication")["mpsp-2l2h"]
    n, rate = strict.high[1], strict.high[0] / strict.high[1]
    planned = _power(headline.high[0] / headline.high[1], headline.low[0] / headline.low[1], "greater", n)
    assert strict.low[0] == 0  # "against 17% vs 0%"
    assert 0 < strict.ci_low < 0.05  # "barely excludes no contrast"
    assert (
        f"Stage 2's {n} seeds a cell had {planned:.2f} against those rates, but its runs at r = 0.9 found "
        f"the rule at {100 * rate:.0f}%, not {100 * headline.high[0] // headline.high[1]}%, and against "
        f"{100 * rate:.0f}% vs 0% {n} seeds a cell have {_power(rate, 0.0, 'greater', n):.2f}: its p lies near "
        f"alpha, and its interval ({strict.ci_low:.2f} to {strict.ci_high:.2f}) barely excludes no contrast"
        in _prose()
    )


def test_the_third_series_is_the_near_miss_the_page_describes():
    from analyses.studies.study_a.series_choice import committed_series

    (row,) = [r for r in committed_series(RESULTS) if r["series"] == "replication r=0.9 memorised"]
    done = _done(RESULTS / row["record"])
    n_adv = json.loads((RESULTS / row["record"] / "config.json").read_text())["task"]["n_adv"]
    wrong = round((1 - done["final"]["adv/acc"]) * n_adv)
    assert done["milestones"]["rule"]["step"] is None and done["milestones"]["rule-99"]["step"] is not None
    assert done["milestones"]["memorized"]["step"] is not None
    assert (
        f"went through a phase 2 (onset at epoch {row['phase-2 onset']:,}) and ended with {wrong} of the "
        f"{n_adv:,} adversarial examples wrong" in _prose()
    )


def _config(run: Path) -> dict:
    return json.loads((run / "config.json").read_text())


def test_the_setup_says_what_the_runs_configs_hold():
    """The setup's data sizes, model, optimiser and evaluation schedule, against every committed
    run of the headline, the map and the weight-decay headline (each run's own config.json).
    """
    prose = _prose()
    headline = sorted((RESULTS / "headline").glob("*/r=*/seed_*"))
    assert len(headline) == 40 and all((run / "DONE").is_file() for run in headline)
    assert "10 seeds a cell, 3,000 epochs, all 40 runs finished" in prose
    epochs = {}
    for grid in ("headline", "map", "wd-headline", "replication"):
        configs = [_config(run) for run in sorted((RESULTS / grid).glob("**/seed_*"))]
        assert configs, grid
        epochs[grid] = {c["train"]["epochs"] for c in configs}
        for config in configs:
            task, model, train = config["task"], config["model"], config["train"]
            assert (task["n_train"], task["n_val"], task["n_adv"], task["n"]) == (16384, 2048, 2048, 5)
            assert (model["d_model"], model["d_mlp"], model["normalization_type"], model["act_fn"]) == (
                64, 128, "LN", "relu",
            )  # fmt: skip
            assert (model["positional_embedding_type"], model["attention_dir"]) == ("standard", "causal")
            assert (train["lr"], train["betas"], train["batch_size"]) == (1e-3, [0.9, 0.98], None)
            assert (train["eval_every"], train["eval_log_points"]) == (25, 40)
            assert train["weight_decay"] == (0.4 if grid == "wd-headline" else 0.1)
    assert epochs == {"headline": {3000}, "map": {1500}, "wd-headline": {4000}, "replication": {3000}}
    for stated in (
        "`train` (16,384 examples at ratio `r`), `val` (2,048,",
        "`adv` (2,048, all opposing it",
        "`d_model = 64`, `d_mlp = 128`, LayerNorm, learned positions, causal attention, ReLU",
        "learning rate 1e-3, betas (0.9, 0.98), weight decay 0.1 unless said, 3,000 epochs (1,500 for the map",
        "4,000 for the weight-decay headline",
        "(every 25 epochs plus 40 log-spaced ones)",
    ):
        assert stated in prose, stated


def test_the_three_new_weight_series_have_at_most_40_checkpoints():
    from analyses.studies.study_a.series_choice import committed_series

    counts = [len(list_checkpoints(RESULTS / r["folder"])) for r in committed_series(RESULTS)]
    assert len(counts) == 3 and max(counts) <= 40
    assert (
        "Three two-layer runs of the decision's grids are committed as weight series (at most 40 checkpoints"
        in _prose()
    )
