"""The studies this toolkit reproduces, one room each: `study_a`, `study_b`, `study_c`.

Each study is a subpackage with the same few rooms (its grids or settings, its recipe and
measurement, its figures, its records, and its `cli.py`, the study's door on the command line).
No study imports another, and nothing outside `analyses.studies` imports a study: the general
report takes a study's section through a hook (`analyses.report.page.ReportSection`, listed in
`REPORT_SECTIONS`), and
`analyses.studies.grids` gathers every study's named grids for `interp sweep --grid`.

`STUDIES` lists the command groups, torch-free, so `interp --help` shows them without
importing any study.
"""

from __future__ import annotations

STUDIES: dict[str, tuple[str, str]] = {
    "study-a": (
        "analyses.studies.study_a.cli",
        "Study A (shortcut saturation): circuit evolution of a run, its dataset and model, the demo.",
    ),
    "study-b": (
        "analyses.studies.study_b.cli",
        "Study B (the grokked illusion): noise injection, WLMD sampling, the protocol per seed, its tables.",
    ),
    "study-c": (
        "analyses.studies.study_c.cli",
        "Study C (label-noise grokking): tables and figures of its noise and weight-decay sweeps.",
    ),
}
"""Study command group -> (its module, the one-line summary `interp --help` shows)."""

REPORT_SECTIONS: tuple[str, ...] = ("analyses.studies.study_a.report",)
"""Modules whose `SECTION` (an `analyses.report.page.ReportSection`) `interp report` adds."""
