"""Study C end to end: from sweep folders to its tables and figures, and its seed-major training.

* `write_study_c(sweep, wd_sweep)`: the tables (`analyses.studies.study_c.tables`) and the
  figures (`analyses.studies.study_c.figures`) into ``SWEEP/study_c/``;
* `train_seed_major`: a study-C grid trained one seed index at a time.

Command line: ``interp study-c report runs/study-c [--wd runs/study-c-wd] [--ipr] [--out DIR]``.
"""

from __future__ import annotations

from pathlib import Path

from analyses.studies.study_c.figures import (
    curves_figure,
    final_accuracy_figure,
    inversion_curve,
    ipr_evolution_figure,
    times_figure,
    wd_figure,
)
from analyses.studies.study_c.tables import markdown_table, regime, runs_table, xi_table
from interp.store import list_checkpoints


def write_study_c(
    sweep_dir: str | Path,
    wd_dir: str | Path | None = None,
    out: str | Path | None = None,
    *,
    ipr: bool = False,
) -> Path:
    """Write the runs and xi tables (CSV, Markdown) and the figures (HTML) into `out` (default SWEEP/study_c).

    Args:
        sweep_dir: Folder of ``interp sweep --grid study-c``.
        wd_dir: Folder of ``interp sweep --grid study-c-wd`` (adds the regimes figure and table).
        out: Output folder.
        ipr: Also draw the IPR evolution of seed 0 at every xi (computes `ipr` per checkpoint).
    """
    out = Path(out) if out else Path(sweep_dir) / "study_c"
    out.mkdir(parents=True, exist_ok=True)
    runs = runs_table(sweep_dir)
    table = xi_table(runs)
    runs.to_csv(out / "runs.csv", index=False)
    table.to_csv(out / "xi_table.csv", index=False)
    (out / "xi_table.md").write_text(markdown_table(table) + "\n")
    figures = {
        "times_vs_xi": times_figure(runs, table),
        "final_accuracy_vs_xi": final_accuracy_figure(runs),
        "training_curves": curves_figure(runs[runs["done"]]),
    }
    if wd_dir is not None:
        wd_runs = runs_table(wd_dir)
        inversions = {r: inversion_curve(r) for r in wd_runs["run"] if list_checkpoints(r)}
        wd_runs["regime"] = [
            regime(t, c) if d else "running"
            for t, c, d in zip(
                wd_runs["final test/acc"], wd_runs["final train/corrupted/acc"], wd_runs["done"]
            )
        ]
        wd_runs["final corrupted true-label acc"] = [
            inversions[r]["corrupted true-label acc"].iloc[-1] if r in inversions else None
            for r in wd_runs["run"]
        ]
        wd_runs.to_csv(out / "wd_runs.csv", index=False)
        figures["wd_regimes"] = wd_figure(wd_runs, inversions)
    if ipr:
        figures["ipr_evolution"] = ipr_evolution_figure(runs[runs["done"]])
    for name, fig in figures.items():
        fig.write_html(out / f"{name}.html", include_plotlyjs="directory")
    return out


def train_seed_major(
    grid_name: str, sweep_dir: str | Path, *, epochs: int | None = None, threads: int = 1
) -> int:
    """Train a study-C grid one run at a time, seed index by seed index (every xi of seed 0 first).

    The same runs, folders and `sweep.json` as ``interp sweep --grid NAME --epochs N --out DIR``
    (either command resumes and completes what the other started); only the order differs, so
    a sweep cut short still covers every xi. Returns the number of runs that failed.
    """
    import dataclasses
    from functools import partial

    from analyses.grids import expand
    from analyses.studies.grids import GRIDS
    from analyses.training import check_specs_memory, train_spec
    from interp.config import to_dict
    from interp.sweep.executors import LocalExecutor
    from interp.sweep.specs import run_sweep, write_sweep

    grid = GRIDS[grid_name]
    if epochs is not None:
        grid = dataclasses.replace(grid, train={**grid.train, "epochs": epochs})
    specs = expand(grid, Path(sweep_dir))
    check_specs_memory(specs)
    write_sweep(sweep_dir, specs, {"grid": to_dict(grid)})
    ordered = sorted(specs, key=lambda s: (s.tags["seed"], specs.index(s)))
    outcomes = run_sweep(ordered, partial(train_spec), LocalExecutor(jobs=1, threads=threads), progress=False)
    return sum(not outcome.ok for outcome in outcomes)
