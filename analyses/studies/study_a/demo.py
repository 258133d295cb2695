"""What `make demo` shows beside its own four runs: study A's committed results and a phase-2 circuit.

The demo trains one seed per cell of study A's confirmation regime (`analyses.studies.grids`,
grid ``demo``): one seed says little, so its report also shows what the seeds of the
confirmation grids did (the committed records under ``results/study-a``: the headline grid as
its runs land, and the vocabulary map), and the circuit evolution of a two-layer r = 0.9 run that
found the rule: the demo's own if it did, otherwise the committed phase-2 checkpoint series,
saying which.
"""

from __future__ import annotations

import html
from pathlib import Path

from analyses.report.page import figure_div, rates_html
from analyses.report.records import load_results, rate_rows
from analyses.report.survival import time_to_milestone_figure
from analyses.studies.study_a.stats import axis_rate_figure
from interp.sweep.specs import read_sweep

RESULTS = Path(__file__).resolve().parents[3] / "results" / "study-a"
"""Study A's committed records (present in a checkout of the repository)."""

CONFIRMATION = ("headline", "map")
"""The committed confirmation grids below `RESULTS`, in the order the report shows them."""

SERIES = "series/mpsp-2l2h-r0.9"
"""The committed weights-only checkpoint series of a two-layer r = 0.9 run that found the rule."""


def committed_sections(results: Path = RESULTS) -> list[str]:
    """Each committed confirmation grid's rates and time-to-rule curves (the map's rule rate per vocabulary too).

    The headline comes first, then the map; a grid still training shows what has finished (the
    report says how many of its runs), so the demo shows the headline's seeds as they land
    without hiding the complete map.
    """
    head = "<h2>What the seeds of the confirmation grids did (committed results)</h2>"
    folders = [results / name for name in CONFIRMATION if (results / name / "sweep.json").is_file()]
    if not folders:
        return [head, "<p>This checkout holds no committed confirmation results.</p>"]
    parts = [
        head,
        "<p>The demo runs one seed per cell, and single seeds mislead in this task. Below, every "
        "run of study A's committed confirmation grids, from <code>results/study-a</code>.</p>",
    ]
    for folder in folders:
        _, runs = load_results(folder)
        finished = sum(r.status == "finished" for r in runs)
        name = html.escape(folder.name)
        parts += [
            f"<h3>The {name} grid</h3>",
            f"<p>{len(runs)} runs of the committed <code>{name}</code> grid ({finished} finished), "
            f"from <code>results/study-a/{name}</code>; rebuild with "
            f"<code>interp report results/study-a/{name}</code>.</p>",
            rates_html(rate_rows(runs), several=False),
            figure_div(
                f"committed-{name}-time-to-rule",
                time_to_milestone_figure(runs, ["rule", "rule-99"]),
                eager=True,
            ),
        ]
        if folder.name == "map":
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
    parts = ["<h2>A two-layer run at r = 0.9 that found the rule</h2>", f"<p>{text}</p>"]
    if run is not None:
        # A committed series is only read: its per-checkpoint results are cached beside the demo.
        cache = None if run.is_relative_to(demo_dir) else demo_dir / "cache" / "phase2"
        fig = circuit_evolution_figure(run, progress=progress, cache=cache)
        parts.append(figure_div("phase2", fig, eager=True))
    return parts
