"""Which decision runs get a dense weight series, by the rule the preregistration fixed.

The decision's preregistration (docs/study_a_log.md, "Weight decay or imbalance?") commits
three two-layer weight-only series for dissection, each chosen by a rule fixed before its grid
ran:

* ``wd-headline r=0.9``: stage 1's two-layer r = 0.9 run with the lowest seed index that reaches
  the rule;
* ``wd-headline r=0.5``: stage 1's two-layer r = 0.5 run with the lowest seed index that reaches
  the rule, or if none does, the one with the highest best adv accuracy;
* ``replication r=0.9 memorised``: stage 2's r = 0.9 run with the lowest seed index that
  memorised without the rule.

A choice is made only once the records settle it: the lowest seed index that reached the rule
is known as soon as every lower index has finished without it; "the highest best adv accuracy"
only when the whole cell has finished.

**Only runs trained on the machine that retrains them are candidates** (`machine`), a departure
from the preregistered rule: a series is retrained with dense checkpoints and must equal its
record bit for bit, which holds only on the machine (CPU model and torch's CPU capability) the
record came from. Stage 1's seed indices 0-3 were trained on a machine that is gone, and a
retrain of one here drifted from its record within 25 epochs (1e-3 in the loss), so the rule
reads "the lowest seed index among this machine's runs". Each record names its machines
(`compute.json`, `interp.store.run_folder.run_machines`); a record that names none is not a
candidate.

`series_steps` picks the checkpoints a series keeps: every checkpoint across phase 2 (thinned
evenly if there are too many) and log-spaced ones elsewhere, at most `MAX_CHECKPOINTS` in all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyses.report.records import FINISHED, RunState, load_results
from analyses.studies.study_a.stats import outcome
from interp.store.export import log_spaced
from interp.store.run_folder import run_machines

FOLDERS = {
    "wd-headline r=0.9": "wd-headline-mpsp-2l2h-r0.9",
    "wd-headline r=0.5": "wd-headline-mpsp-2l2h-r0.5",
    "replication r=0.9 memorised": "replication-mpsp-2l2h-r0.9-memorised",
}
"""Each series' folder under ``results/study-a/series/``."""

MAX_CHECKPOINTS = 40
"""The most checkpoints a committed series keeps (the preregistration's cap)."""

OUTSIDE = 16
"""Log-spaced checkpoints outside phase 2's window (the existing series' count)."""


@dataclass(frozen=True)
class SeriesChoice:
    """One preregistered series and the run its rule picks.

    Attributes:
        name: The series' name (``"wd-headline r=0.9"``, ...).
        run: The chosen run's record, or None while the records do not settle it.
        why: How the rule picked it, or why it cannot pick yet.
    """

    name: str
    run: RunState | None
    why: str


def _cell(runs: list[RunState], r: float) -> list[RunState]:
    """The two-layer runs at ratio `r`, by seed index."""
    cell = [run for run in runs if run.spec.tags.get("preset") == "mpsp-2l2h" and run.spec.tags.get("r") == r]
    return sorted(cell, key=lambda run: run.spec.tags["seed"])


def _lowest(cell: list[RunState], hit: Callable[[RunState], bool], what: str) -> tuple[RunState | None, str]:
    """The lowest seed index whose finished run satisfies `hit`, once every lower index has finished."""
    for run in cell:
        seed = run.spec.tags["seed"]
        if run.status != FINISHED:
            return None, f"seed index {seed} has not finished, and no lower index {what}"
        if hit(run):
            return run, f"seed index {seed}: the lowest that {what}"
    return None, f"no run of the cell {what}" if cell else "the cell has no runs yet"


def _reached(run: RunState) -> bool:
    return run.milestones.get("rule", {}).get("step") is not None


def trained_on(run: RunState, machine: Mapping[str, Any]) -> bool:
    """Whether `machine` (``{"cpu", "cpu_capability"}``) trained the whole of `run`."""
    return run_machines(run.spec.out) == [dict(machine)]


def choose_series(
    stage_1: list[RunState], stage_2: list[RunState], machine: Mapping[str, Any] | None = None
) -> list[SeriesChoice]:
    """The three preregistered series' runs, from stage 1's and stage 2's run states; with
    `machine`, among the runs it trained (`trained_on`) only.
    """
    if machine is not None:
        stage_1, stage_2 = ([r for r in runs if trained_on(r, machine)] for runs in (stage_1, stage_2))
    choices = [SeriesChoice("wd-headline r=0.9", *_lowest(_cell(stage_1, 0.9), _reached, "reached the rule"))]
    cell = _cell(stage_1, 0.5)
    run, why = _lowest(cell, _reached, "reached the rule")
    if run is None and cell and all(r.status == FINISHED for r in cell):
        run = max(cell, key=lambda r: (r.best.get("adv/acc", 0.0), -r.spec.tags["seed"]))
        why = f"{why}: seed index {run.spec.tags['seed']} has the highest best adv accuracy"
    choices.append(SeriesChoice("wd-headline r=0.5", run, why))
    memorised = _lowest(
        _cell(stage_2, 0.9),
        lambda r: outcome(r) == "memorised without the rule",
        "memorised without the rule",
    )
    return [*choices, SeriesChoice("replication r=0.9 memorised", *memorised)]


def dissection_runs(results: str | Path, machine: Mapping[str, Any] | None = None) -> list[SeriesChoice]:
    """`choose_series` on the committed decision grids under `results` (study A's results folder,
    holding ``wd-headline/`` and ``replication/``; a grid not started yet has no runs), among
    the runs `machine` trained if given.
    """
    results = Path(results)

    def grid(name: str) -> list[RunState]:
        return load_results(results / name)[1] if (results / name / "sweep.json").is_file() else []

    return choose_series(grid("wd-headline"), grid("replication"), machine)


def series_steps(steps: list[int], onset: int | None, end: int | None, margin: int = 100) -> list[int]:
    """The checkpoints a series keeps: all of `steps` within `margin` epochs of phase 2 (onset to
    end), thinned evenly to leave room for `OUTSIDE` log-spaced others, at most `MAX_CHECKPOINTS`;
    without a phase 2, `MAX_CHECKPOINTS` log-spaced ones.
    """
    if onset is None or end is None:
        return log_spaced(steps, MAX_CHECKPOINTS)
    low, high = onset - margin, end + margin
    inside = [s for s in steps if low <= s <= high]
    room = MAX_CHECKPOINTS - OUTSIDE
    if len(inside) > room:  # keep both ends of the window and an even spread between them
        inside = sorted({inside[round(i * (len(inside) - 1) / (room - 1))] for i in range(room)})
    outside = [s for s in steps if s < low or s > high]
    return sorted(set(inside) | set(log_spaced(outside, OUTSIDE) if len(outside) >= 2 else outside))


def committed_series(results: str | Path) -> list[dict[str, Any]]:
    """One row per preregistered series: its folder under ``results/series`` and, once committed,
    the record it equals, its checkpoints, phase-2 onset and rule epoch (None until then).
    """
    from analyses.studies.study_a.evolution import phase2
    from interp.store import list_checkpoints
    from interp.store.run_folder import read_done, read_metrics

    rows = []
    chosen: dict[str, dict[str, RunState | None]] = {}  # per machine: the records are read once
    for name, folder in FOLDERS.items():
        path = Path(results) / "series" / folder
        row: dict[str, Any] = {"series": name, "folder": f"series/{folder}", "committed": path.is_dir()}
        if path.is_dir():
            (machine,) = run_machines(path)
            key = repr(sorted(machine.items()))
            if key not in chosen:
                chosen[key] = {c.name: c.run for c in dissection_runs(results, machine)}
            run = chosen[key][name]
            rise = phase2(read_metrics(path))
            row |= {
                "record": run
                and Path(run.spec.out).resolve().relative_to(Path(results).resolve()).as_posix(),
                "checkpoints": len(list_checkpoints(path)),
                "phase-2 onset": rise and rise.onset,
                "rule": read_done(path)["milestones"].get("rule", {}).get("step"),
            }
        rows.append(row)
    return rows
