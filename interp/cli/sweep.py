"""`interp sweep`, `interp report`, `interp evolve` and `interp demo` (part of the composition root)."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from interp.errors import ConfigError, did_you_mean


def load_grid(name_or_file: str, *, seeds: int | None, epochs: int | None, axes: list[str]) -> Any:
    """A named grid (`analyses.studies.grids.GRIDS`) or a JSON file, with CLI overrides applied."""
    from analyses.studies.grids import GRIDS, grid_from_dict

    if name_or_file in GRIDS:
        grid = GRIDS[name_or_file]
    elif name_or_file.endswith(".json"):
        try:
            grid = grid_from_dict(json.loads(Path(name_or_file).read_text()))
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read grid file {name_or_file!r}: {err}") from None
    else:
        raise ConfigError(f"unknown grid {name_or_file!r}", did_you_mean(name_or_file, GRIDS) + ", or a .json file")
    overrides: dict[str, Any] = {}
    if seeds is not None:
        overrides["seeds"] = seeds
    if epochs is not None:
        overrides["train"] = {**grid.train, "epochs": epochs}
    if axes:
        overrides["axes"] = {**grid.axes, **dict(_parse_axis(a) for a in axes)}
    return replace(grid, **overrides)


def _parse_axis(text: str) -> tuple[str, list[Any]]:
    """``"r=0.5,0.9"`` -> ``("r", [0.5, 0.9])`` (values parsed as JSON where possible)."""
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ConfigError(f"--set {text!r} is not FIELD=V1,V2,...", "e.g. --set r=0.5,0.9")

    def parse(value: str) -> Any:
        try:
            return json.loads(value)
        except ValueError:
            return value

    return name.strip(), [parse(v.strip()) for v in values.split(",")]


def make_executor(kind: str, *, jobs: int | None, threads: int | None, folder: Path, partition: str | None,
                  timeout_min: int) -> Any:
    """The executor named on the command line: local (joblib), slurm or submitit-local."""
    from interp.sweep.executors import LocalExecutor

    if kind == "local":
        return LocalExecutor(jobs=jobs, threads=threads)
    from interp.sweep.executors import SubmititExecutor

    cluster = {"slurm": "slurm", "submitit-local": "local"}[kind]
    return SubmititExecutor(folder=folder / "submitit", cluster=cluster, partition=partition,
                            timeout_min=timeout_min, threads=threads)


def run_grid(grid: Any, out: Path, executor: Any, *, progress: bool) -> tuple[int, list[str]]:
    """Write the sweep file, train every unfinished run, and return (finished, failures)."""
    from analyses.studies.recipes import train_spec
    from analyses.studies.grids import expand
    from interp.config import to_dict
    from interp.sweep.specs import run_sweep, write_sweep

    specs = expand(grid, out)
    write_sweep(out, specs, {"grid": to_dict(grid)})
    failures, finished = [], 0
    for outcome in run_sweep(specs, partial(train_spec), executor, progress=progress):
        if outcome.ok:
            finished += 1
        else:
            failures.append(f"{outcome.item.out}: {outcome.error.splitlines()[0]}")
    return finished, failures


def write_sweep_report(out: Path, *, evolution: bool, progress: bool) -> Path:
    """The sweep's HTML report; per-run circuit-evolution figures for study-A runs."""
    from analyses.studies.report import accuracy_figure, write_report

    figure = accuracy_figure
    if evolution:
        from analyses.studies.study_a import circuit_evolution_figure

        figure = partial(circuit_evolution_figure, progress=progress)
    return write_report(out, figure=figure)
