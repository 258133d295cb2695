"""What `make demo`'s report opens with: study A's answer from the committed records, and a phase-2 circuit.

The demo trains one seed per cell of study A's confirmation regime (`analyses.studies.grids`,
grid ``demo``). One seed says nothing about a rate, so the report opens with the answer the
committed records give (``results/study-a``): the preregistered tests of the grids that have
finished, read as docs/study_a.md reads them, whether the grids preregistered to decide the
study have finished, and what the committed grids did (rates, time-to-rule curves, the map).
Then the circuit evolution of a two-layer r = 0.9 run that found the rule: the demo's own if it
did, otherwise the committed phase-2 checkpoint series, saying which. The demo's own runs come
last, under "Your runs" (`analyses.studies.study_a.cli.demo_report`).
"""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

from analyses.report.page import figure_div, html_table, rates_html
from analyses.report.records import FINISHED, RunState, load_results, rate_rows
from analyses.report.survival import time_to_milestone_figure
from analyses.studies.study_a.decision import RESULTS, Reading, replication
from analyses.studies.study_a.decision import decision as study_a_decision
from analyses.studies.study_a.report import test_cells
from analyses.studies.study_a.stats import PREREGISTERED_SWEEPS, Contrast, axis_rate_figure, contrast_tests
from interp.sweep.specs import read_sweep

CONFIRMATION = ("headline", "map")
"""The committed confirmation grids below `RESULTS` that every checkout holds."""

DECIDING = ("wd-headline", "replication")
"""The grids preregistered to decide study A at CPU scale (docs/study_a.md, "Weight decay or
imbalance?"), in the order they run; their folders appear below `RESULTS` as their runs land."""

SHOWN = ("headline", *DECIDING, "map")
"""The committed grids whose rates and time-to-rule curves the answer shows, in this order."""

SERIES = "series/mpsp-2l2h-r0.9"
"""The committed weights-only checkpoint series of a two-layer r = 0.9 run that found the rule."""

ALPHA = 0.05
"""The preregistered tests' significance level (docs/study_a.md)."""

CLAIM = (
    "<p><b>The claim.</b> With a spurious shortcut present, more imbalance (the shortcut agrees "
    "with the label more often, ratio r) makes a two-layer model more likely to find the true rule "
    "and a one-layer model less likely. Study A tests it at CPU scale: the positional shortcut "
    "<code>x[0] mod 2</code>, 32 values, 16,384 training examples, r = 0.9 against r = 0.5 "
    "(docs/study_a.md).</p>"
)
MODELS = {"mpsp-2l2h": "two layers", "mpsp-1l1h": "one layer"}


def answer_section(results: Path = RESULTS) -> list[str]:
    """Study A's answer at CPU scale from the committed records below `results`, then what its grids did.

    Only what the records and the preregistration say: the tests of each preregistered grid
    whose runs have all finished (`reading`), whether the grids that decide the study have, and
    each committed grid's rates and time-to-rule curves (a grid still training shows its finished
    runs, with no test).
    """
    parts = ["<h2>Study A's answer at CPU scale (committed results)</h2>", CLAIM]
    if not (results / "headline" / "sweep.json").is_file():
        return [*parts, "<p>This checkout holds no committed confirmation results.</p>"]
    runs = {
        name: load_results(results / name)[1] for name in SHOWN if (results / name / "sweep.json").is_file()
    }
    parts.append(decision(runs, results))
    tests: list[Contrast] = []
    for name, label in PREREGISTERED_SWEEPS.items():
        if name in runs and all(r.status == FINISHED for r in runs[name]):
            # Its folder is read alone (sweep "."): named here, so its contrasts are its tests.
            found = [
                dataclasses.replace(t, sweep=name)
                for m in ("rule", "rule-99")
                for t in contrast_tests(runs[name], m)
            ]
            tests += found
            parts.append(reading(label, name, len(runs[name]), [t for t in found if t.milestone == "rule"]))
    if tests:
        parts.append(html_table([test_cells(t.row()) for t in tests], []))
    parts.append(
        "<p>What agrees with the study and what does not, the mechanism and the limits: "
        "docs/study_a.md. Below, what each committed grid did, every seed (rebuild any of them "
        "with <code>interp report results/study-a/NAME</code>).</p>"
    )
    for name, grid_runs in runs.items():
        parts += grid_html(name, grid_runs)
    return parts


def decision(runs: dict[str, list[RunState]], results: Path = RESULTS) -> str:
    """Study A's preregistered decision, or whether the grids that decide it (`DECIDING`) have
    finished, in one paragraph.

    Stage 1's reading (`analyses.studies.study_a.decision.decision`) is the answer once its runs
    have all finished; the replication's state follows it. Before that, each deciding grid's
    progress, and the first headline's reading as the answer so far.
    """
    progress, finished = {}, {}
    for name in DECIDING:
        done = sum(r.status == FINISHED for r in runs.get(name, []))
        total = len(runs.get(name, []))
        progress[name] = f"{done} of {total} runs finished" if total else "not started"
        finished[name] = bool(total) and done == total
    stage_1, stage_2 = _readings(results)
    if stage_1 is not None and stage_1.decided:
        later = (
            f"{stage_2.outcome} ({'; '.join(stage_2.reasons)})"
            if stage_2 is not None and stage_2.decided
            else f"{progress['replication']}; its test is read when every run has finished"
        )
        primary = next(c for c in stage_1.tests if c.role == "primary")
        return (
            f"<p><b>The answer: {html.escape(stage_1.outcome)}.</b> The decision preregistered in "
            'docs/study_a.md ("Weight decay or imbalance?"), by its primary test on the weight-decay '
            f"headline (below): {MODELS.get(primary.configuration, primary.configuration)} reached the "
            f"rule in {primary.high[0]} of {primary.high[1]} runs at r = 0.9 and {primary.low[0]} of "
            f"{primary.low[1]} at r = 0.5, one-sided Fisher p = {primary.p_value:.3g} (alpha {ALPHA}). "
            f"The replication at weight decay 0.1: {html.escape(later)}.</p>"
        )
    listed = "; ".join(f"the {PREREGISTERED_SWEEPS[name]}: {state}" for name, state in progress.items())
    if all(finished.values()):
        return (
            f"<p><b>The grids preregistered to decide it have finished</b> ({listed}). Their tests "
            "are below; docs/study_a.md reads them by the rule fixed before they ran.</p>"
        )
    return (
        "<p><b>Not decided yet.</b> The grids preregistered to decide study A at CPU scale (docs/"
        f'study_a.md, "Weight decay or imbalance?") are still to finish ({listed}); their tests '
        "are read when every run of a grid has finished. Until then, the answer is the first "
        "headline's:</p>"
    )


def _readings(results: Path) -> tuple[Reading | None, Reading | None]:
    """Stage 1's and stage 2's readings, each None where `results` holds a grid of that name that
    is not the preregistered one (another weight decay, as a user's own results may be).
    """
    readings: list[Reading | None] = []
    for read in (study_a_decision, replication):
        try:
            readings.append(read(results))
        except ValueError:
            readings.append(None)
    return readings[0], readings[1]


def reading(label: str, name: str, n_runs: int, tests: list[Contrast]) -> str:
    """A finished preregistered grid's tests in words: the direction against the study's, and significance.

    E.g. "points the study's way in both models and is significant in neither", then per model
    the rates, the one-sided Fisher p and Newcombe's 95% interval of the difference.
    """
    agree = [t for t in tests if (t.difference > 0) == (t.alternative == "greater") and t.difference != 0]
    significant = [t for t in tests if t.p_value < ALPHA]
    head = (
        f"points the study's way in {_models(agree, tests)} and is significant in "
        f"{_models(significant, tests)} (alpha {ALPHA})"
    )
    sentences = [
        f"{MODELS.get(t.configuration, t.configuration).capitalize()} reached the rule in "
        f"{t.high[0]} of {t.high[1]} runs at r = 0.9 and {t.low[0]} of {t.low[1]} at r = 0.5 "
        f"({t.role} test: one-sided Fisher p = {t.p_value:.3g}; difference {t.difference:.2f}, "
        f"95% interval {t.ci_low:.2f} to {t.ci_high:.2f})."
        for t in tests
    ]
    return (
        f"<p><b>The {html.escape(label)}</b> ({n_runs} runs, all finished; "
        f"<code>results/study-a/{html.escape(name)}</code>) {head}. {' '.join(sentences)}</p>"
    )


def _models(chosen: list[Contrast], tests: list[Contrast]) -> str:
    if len(chosen) == len(tests):
        return (
            "both models"
            if len(tests) == 2
            else " and ".join(MODELS.get(t.configuration, t.configuration) for t in tests)
        )
    if not chosen:
        return "neither" if len(tests) == 2 else "no model"
    return " and ".join(MODELS.get(t.configuration, t.configuration) for t in chosen)


def grid_html(name: str, runs: list[RunState]) -> list[str]:
    """One committed grid: its rates, its time-to-rule curves and (the map) its rule rate per vocabulary."""
    finished = sum(r.status == FINISHED for r in runs)
    note = "" if finished == len(runs) else "; still training: no test is read until every run has finished"
    parts = [
        f"<h3>The {html.escape(name)} grid</h3>",
        f"<p>{len(runs)} runs of the committed <code>{html.escape(name)}</code> grid ({finished} "
        f"finished{note}), from <code>results/study-a/{html.escape(name)}</code>.</p>",
        rates_html(rate_rows(runs), several=False),
        figure_div(
            f"committed-{name}-time-to-rule", time_to_milestone_figure(runs, ["rule", "rule-99"]), eager=True
        ),
    ]
    if name == "map":
        parts.append(figure_div("committed-map", axis_rate_figure(runs), eager=True))
    return parts


def phase2_run(demo_dir: Path, results: Path = RESULTS) -> tuple[Path | None, str]:
    """The two-layer r = 0.9 run whose circuit evolution the demo shows, and a sentence saying which.

    The demo's own run if it reached the rule; otherwise the committed phase-2 series; None if
    neither is there.
    """
    specs, _ = read_sweep(demo_dir)
    own = next(s for s in specs if s.tags.get("preset") == "mpsp-2l2h" and s.tags.get("r") == 0.9)
    _, runs = load_results(demo_dir)
    state = next(r for r in runs if r.spec.out == own.out)
    if state.milestones.get("rule", {}).get("step") is not None:
        step = state.milestones["rule"]["step"]
        return own.out, f"The demo's own two-layer r = 0.9 run reached the rule at epoch {step:,}."
    series = results / SERIES
    if (series / "config.json").is_file():
        return series, (
            "The demo's own two-layer r = 0.9 run did not reach the rule, so this is the committed "
            f"checkpoint series of one that did (<code>results/study-a/{SERIES}</code>)."
        )
    return None, "The demo's two-layer r = 0.9 run did not reach the rule, and no committed series is here."


def phase2_section(demo_dir: Path, *, progress: bool = False, results: Path = RESULTS) -> list[str]:
    """The circuit evolution of a two-layer r = 0.9 run that found the rule (`phase2_run`), with its caption."""
    from analyses.studies.study_a.evolution import circuit_evolution_figure

    run, text = phase2_run(demo_dir, results)
    caption = (
        " On one epoch axis: accuracy, the gradient conflict and amplification, and each head's "
        "fingerprints; phase 2 (the rise of the lower of val and adv accuracy to 100%) is shaded."
    )
    parts = [
        "<h2>A two-layer run at r = 0.9 that found the rule</h2>",
        f"<p>{text}{caption if run else ''}</p>",
    ]
    if run is not None:
        # A committed series is only read: its per-checkpoint results are cached beside the demo.
        cache = None if run.is_relative_to(demo_dir) else demo_dir / "cache" / "phase2"
        fig = circuit_evolution_figure(run, progress=progress, cache=cache)
        parts.append(figure_div("phase2", fig, eager=True))
    return parts
