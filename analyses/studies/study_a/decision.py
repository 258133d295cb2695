"""Study A decided at CPU scale: the preregistered readings of its last two grids, from the records.

Fixed in docs/study_a_log.md ("Weight decay or imbalance? Study A decided at CPU scale
(preregistered)", 2026-12-05) before any of their runs; this module applies them, it does not
choose them. One sweep seed (800) is shared by both grids, so seed index i is the same data seed
and initialisation in both.

**Stage 1, the weight-decay headline** (``results/study-a/wd-headline``): `mpsp-2l2h` and
`mpsp-1l1h` at r = 0.9 and 0.5, weight decay 0.4, seed indices 0-9, 4,000 epochs. Its primary
test (two layers, rule rate at r = 0.9 above r = 0.5, one-sided Fisher exact, the rule reached
at any evaluation) and secondary test (one layer, below) are `stats.contrast_tests`, with
Newcombe's interval. The reading (`decide`), the first that holds:

1. *imbalance helps at weight decay 0.4* if the primary p < 0.05;
2. *weight decay, not imbalance* if the Newcombe upper bound of the two-layer difference is below
   0.3 **and** r = 0.5 at weight decay 0.4 beats r = 0.5 at weight decay 0.1 on the paired seeds:
   stage 1's two-layer r = 0.5 seed indices 0-9 against stage 2's, both read at epoch 3,000 (the
   rule reached at or before it), Newcombe's lower bound of the difference above 0 (the
   preregistered interval is Newcombe's for two rates; the seeds pair the runs, not the interval);
3. *undecided* otherwise.

**Stage 2, the replication** (``results/study-a/replication``): `mpsp-2l2h` at r = 0.9 and 0.5,
weight decay 0.1, seed indices 0-29, 3,000 epochs; *replicated* if its primary test gives
p < 0.05, *not replicated* otherwise (`replicate`).

No reading is made while a run it needs has not finished: the answer is then *incomplete*, with
how many of the preregistered runs have finished (a diverged run counts as not finished: the
preregistration says nothing about one, so a person has to). Stage 2 is needed by reading 2
only; a stage 1 that already gives reading 1, or an upper bound at 0.3 or above, is read
without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from analyses.report.records import FINISHED, RunState, load_results
from analyses.studies.study_a.stats import HIGH_R, LOW_R, Contrast, contrast_tests, newcombe

RESULTS = Path(__file__).resolve().parents[3] / "results" / "study-a"
"""Study A's committed records (present in a checkout of the repository)."""

STAGE_1, STAGE_2 = "wd-headline", "replication"
"""The two grids' folders below `RESULTS`."""

PRESETS = {STAGE_1: ("mpsp-2l2h", "mpsp-1l1h"), STAGE_2: ("mpsp-2l2h",)}
SEEDS = {STAGE_1: 10, STAGE_2: 30}
WEIGHT_DECAY = {STAGE_1: 0.4, STAGE_2: 0.1}
ALPHA = 0.05
MARGIN = 0.3  # reading 2 asks the difference's Newcombe upper bound to be below this
READ_AT = 3000  # the epoch at which the paired comparison reads both stages
PAIRED = range(10)  # the seed indices paired across the two stages

IMBALANCE = "imbalance helps at weight decay 0.4"
WEIGHT_DECAY_NOT_IMBALANCE = "weight decay, not imbalance"
UNDECIDED = "undecided"
REPLICATED, NOT_REPLICATED = "replicated", "not replicated"
INCOMPLETE = "incomplete"
READINGS = (IMBALANCE, WEIGHT_DECAY_NOT_IMBALANCE, UNDECIDED)
"""Stage 1's readings in their preregistered order (the first that holds)."""


@dataclass(frozen=True)
class Reading:
    """One preregistered reading, or why there is none yet.

    Attributes:
        outcome: One of `READINGS` (stage 1), `REPLICATED` / `NOT_REPLICATED` (stage 2), or
            `INCOMPLETE`.
        reasons: Why, one clause each (counts, p, intervals; what is missing).
        finished: The preregistered runs of the grid that have finished.
        expected: How many it has (40 for stage 1, 60 for stage 2).
        tests: The grid's contrast tests on the rule (`stats.Contrast`), once it has finished.
    """

    outcome: str
    reasons: tuple[str, ...]
    finished: int
    expected: int
    tests: tuple[Contrast, ...] = ()

    @property
    def decided(self) -> bool:
        """Whether this is a reading (not `INCOMPLETE`)."""
        return self.outcome != INCOMPLETE

    def sentence(self) -> str:
        """The outcome and its reasons in one line, e.g. ``"incomplete: 16 of 40 runs finished"``."""
        return f"{self.outcome}: " + "; ".join(self.reasons)


def preregistered(runs: list[RunState], stage: str) -> list[RunState]:
    """The runs of `stage`'s grid that the preregistration names (its presets, both ratios, its seeds).

    Raises:
        ValueError: If one of them trained at another weight decay than the stage's.
    """
    named = [
        run
        for run in runs
        if run.spec.tags.get("preset") in PRESETS[stage]
        and run.spec.tags.get("r") in (HIGH_R, LOW_R)
        and run.spec.tags.get("seed") in range(SEEDS[stage])
    ]
    for run in named:
        if run.spec.train.get("weight_decay", WEIGHT_DECAY[stage]) != WEIGHT_DECAY[stage]:
            raise ValueError(
                f"{run.spec.out}: weight decay {run.spec.train['weight_decay']}; "
                f"the {stage} grid was preregistered at {WEIGHT_DECAY[stage]}"
            )
    return named


def _expected(stage: str) -> int:
    return len(PRESETS[stage]) * 2 * SEEDS[stage]


def _finished(runs: list[RunState]) -> int:
    return sum(run.status == FINISHED for run in runs)


def _test(tests: list[Contrast], preset: str) -> Contrast:
    return next(t for t in tests if t.configuration == preset)


def _describe(test: Contrast, by: str) -> str:
    (k1, n1), (k2, n2) = test.high, test.low
    return (
        f"{test.configuration} ({test.role} test): the rule in {k1} of {n1} runs at r = {HIGH_R} and "
        f"{k2} of {n2} at r = {LOW_R} {by}, one-sided Fisher p = {test.p_value:.3g}; difference "
        f"{test.difference:+.2f}, Newcombe 95% interval [{test.ci_low:+.2f}, {test.ci_high:+.2f}]"
    )


def _rule_by(runs: list[RunState], epoch: int) -> int:
    """How many of `runs` reached the rule at or before `epoch`."""
    steps = [run.milestones.get("rule", {}).get("step") for run in runs]
    return sum(step is not None and step <= epoch for step in steps)


def _paired(stage_1: list[RunState], stage_2: list[RunState]) -> tuple[list[RunState], list[RunState]]:
    """The two-layer r = 0.5 runs of seed indices 0-9 in each stage."""

    def cell(runs: list[RunState]) -> list[RunState]:
        return [
            r
            for r in runs
            if r.spec.tags["preset"] == "mpsp-2l2h"
            and r.spec.tags["r"] == LOW_R
            and r.spec.tags["seed"] in PAIRED
        ]

    return cell(stage_1), cell(stage_2)


def decide(stage_1: list[RunState], stage_2: list[RunState] = ()) -> Reading:
    """Stage 1's preregistered reading (module docstring) from its runs and stage 2's (either may
    hold other runs: only the preregistered ones are read).
    """
    runs = preregistered(stage_1, STAGE_1)
    finished, expected = _finished(runs), _expected(STAGE_1)
    if finished < expected:
        return Reading(INCOMPLETE, (f"{finished} of {expected} runs finished",), finished, expected)
    tests = [dataclasses.replace(t, sweep=STAGE_1) for t in contrast_tests(runs)]
    primary, secondary = _test(tests, "mpsp-2l2h"), _test(tests, "mpsp-1l1h")
    reasons = [_describe(primary, "by epoch 4,000")]
    done = (finished, expected, (primary, secondary))
    context = f"secondary, not part of the reading: {_describe(secondary, 'by epoch 4,000')}"
    if primary.p_value < ALPHA:
        return Reading(IMBALANCE, (*reasons, f"p < {ALPHA}", context), *done)
    if primary.ci_high >= MARGIN:
        reasons.append(
            f"p >= {ALPHA}, and the interval's upper end reaches {MARGIN}: a contrast that large is not ruled out"
        )
        return Reading(UNDECIDED, (*reasons, context), *done)
    reasons.append(f"p >= {ALPHA}, and the interval's upper end is below {MARGIN}")
    at_04, at_01 = _paired(runs, preregistered(list(stage_2), STAGE_2))
    missing = len(PAIRED) - _finished(at_01)
    if missing:
        needs = (
            f"reading 2 needs stage 2's two-layer r = {LOW_R} seeds 0-{len(PAIRED) - 1} at weight decay 0.1"
        )
        status = f"{len(PAIRED) - missing} of {len(PAIRED)} finished"
        return Reading(INCOMPLETE, (*reasons, f"{needs}: {status}"), *done)
    k4, k1 = _rule_by(at_04, READ_AT), _rule_by(at_01, READ_AT)
    low, high = newcombe(k4, len(at_04), k1, len(at_01))
    reasons.append(
        f"mpsp-2l2h at r = {LOW_R}, seeds 0-{len(PAIRED) - 1}, by epoch {READ_AT:,}: the rule in {k4} of "
        f"{len(at_04)} at weight decay 0.4 and {k1} of {len(at_01)} at 0.1; difference "
        f"{(k4 - k1) / len(PAIRED):+.2f}, Newcombe 95% interval [{low:+.2f}, {high:+.2f}]"
    )
    if low > 0:
        reasons.append("its lower end is above 0: weight decay 0.4 beats 0.1 at r = 0.5")
        return Reading(WEIGHT_DECAY_NOT_IMBALANCE, (*reasons, context), *done)
    reasons.append("its lower end is not above 0")
    return Reading(UNDECIDED, (*reasons, context), *done)


def replicate(stage_2: list[RunState]) -> Reading:
    """Stage 2's preregistered reading: *replicated* if its primary test gives p < 0.05."""
    runs = preregistered(stage_2, STAGE_2)
    finished, expected = _finished(runs), _expected(STAGE_2)
    if finished < expected:
        return Reading(INCOMPLETE, (f"{finished} of {expected} runs finished",), finished, expected)
    (primary,) = [dataclasses.replace(t, sweep=STAGE_2) for t in contrast_tests(runs)]
    outcome = REPLICATED if primary.p_value < ALPHA else NOT_REPLICATED
    why = f"p {'<' if outcome == REPLICATED else '>='} {ALPHA}"
    return Reading(
        outcome, (_describe(primary, f"by epoch {READ_AT:,}"), why), finished, expected, (primary,)
    )


def _runs(results: Path, stage: str) -> list[RunState]:
    folder = results / stage
    return load_results(folder)[1] if (folder / "sweep.json").is_file() else []


def decision_runs(results: str | Path = RESULTS) -> list[RunState]:
    """Both grids' runs below `results`, each named by its grid (``wd-headline``, ``replication``),
    as the page's descriptive tables (outcomes, robustness, signature) group them.
    """
    return [
        dataclasses.replace(run, sweep=stage)
        for stage in (STAGE_1, STAGE_2)
        for run in _runs(Path(results), stage)
    ]


def decision(results: str | Path = RESULTS) -> Reading:
    """Stage 1's reading (`decide`) from the committed records below `results`."""
    results = Path(results)
    return decide(_runs(results, STAGE_1), _runs(results, STAGE_2))


def replication(results: str | Path = RESULTS) -> Reading:
    """Stage 2's reading (`replicate`) from the committed records below `results`."""
    return replicate(_runs(Path(results), STAGE_2))
