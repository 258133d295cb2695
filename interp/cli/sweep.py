"""`interp sweep` and `interp report`: grids of runs and their reports (composition root).

`interp study-a demo` (`analyses.studies.study_a.cli`) is a sweep and a report on built-in defaults.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import click

from interp.errors import ConfigError, did_you_mean


def load_grid(name_or_file: str, *, seeds: int | None, epochs: int | None, axes: list[str]) -> Any:
    """A named grid (`analyses.studies.grids.GRIDS`) or a JSON file, with CLI overrides applied."""
    from analyses.grids import grid_from_dict
    from analyses.studies.grids import GRIDS, PENDING

    if name_or_file in PENDING:
        raise ConfigError(f"grid {name_or_file!r} cannot be built yet: it {PENDING[name_or_file]}")
    if name_or_file in GRIDS:
        grid = GRIDS[name_or_file]
    elif name_or_file.endswith(".json"):
        try:
            grid = grid_from_dict(json.loads(Path(name_or_file).read_text()))
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read grid file {name_or_file!r}: {err}") from None
    else:
        raise ConfigError(
            f"unknown grid {name_or_file!r}", did_you_mean(name_or_file, GRIDS) + ", or a .json file"
        )
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


def make_executor(
    kind: str, *, jobs: int | None, threads: int | None, folder: Path, partition: str | None, timeout_min: int
) -> Any:
    """The executor named on the command line: local (worker processes), slurm or submitit-local."""
    from interp.sweep.executors import LocalExecutor

    if kind == "local":
        return LocalExecutor(jobs=jobs, threads=threads)
    from interp.sweep.executors import SubmititExecutor

    cluster = {"slurm": "slurm", "submitit-local": "local"}[kind]
    return SubmititExecutor(
        folder=folder / "submitit",
        cluster=cluster,
        partition=partition,
        timeout_min=timeout_min,
        threads=threads,
    )


def run_grid(
    grid: Any, out: Path, executor: Any, *, progress: bool, device: str = "cpu"
) -> tuple[int, list[str]]:
    """Write the sweep file, train every unfinished run on `device`, and return (finished, failures).

    Runs too large for memory are refused before any trains (`check_specs_memory`). Runs train
    seed-major (every configuration's seed 0, then every seed 1, ...).
    """
    from analyses.grids import expand
    from analyses.training import check_specs_memory, train_spec
    from interp.config import to_dict
    from interp.errors import divergence_line
    from interp.sweep.specs import run_sweep, write_sweep

    specs = expand(grid, out)
    check_sweep_engine(specs)
    check_specs_memory(specs)
    write_sweep(out, specs, {"grid": to_dict(grid)})
    # Seed-major order: every configuration gets its first seeds first, so a sweep stopped
    # half-way already has rates for every cell (sorted() is stable: grid order within a seed).
    order = sorted(specs, key=lambda spec: spec.tags.get("seed", 0))
    failures, finished, elsewhere, diverged = [], 0, 0, []
    for outcome in run_sweep(order, partial(train_spec, device=device), executor, progress=progress):
        if outcome.ok:
            finished += 1
            elsewhere += outcome.elsewhere
            if "diverged" in outcome.value:
                diverged.append(divergence_line(outcome.item.out, outcome.value["diverged"]))
        else:
            failures.append(f"{outcome.item.out}: {outcome.error.splitlines()[0]}")
    if elsewhere:
        click.echo(f"{elsewhere} runs were trained by another process on {out}", err=True)
    for line in diverged:
        click.echo(f"diverged: {line}", err=True)
    return finished, failures


def check_sweep_engine(specs: list[Any]) -> None:
    """Refuse, before any run trains, a grid that a sweep's engine cannot train as recorded.

    `interp sweep` trains one run per worker (the separate engine: stacking seeds did not pay on
    CPU, `benchmarks/README.md`), so a grid that asks for ``engine: vectorized``, or a run folder
    that records it, is refused: a resumed sweep keeps the engine its runs were trained with.

    Raises:
        ConfigError: Naming the engine asked for, or the run folder (`check_engine`).
    """
    from interp.store.run_folder import check_engine
    from interp.training.config import TRAIN_ENGINE

    for spec in specs:
        if spec.train.get("engine", "separate") != "separate":
            raise ConfigError(
                f"interp sweep trains one run per worker, but the grid's train.engine is {spec.train['engine']!r}",
                "drop engine from the grid (stacked seeds: interp train --seeds ... --vectorize)",
            )
        check_engine(spec.out, "separate", **TRAIN_ENGINE)


def write_sweep_report(
    folder: Path,
    *,
    evolution: bool,
    progress: bool,
    out: Path | None = None,
    **page: Any,
) -> Path:
    """The HTML report of the sweeps below `folder`, written to `out` (default: `folder`);
    with `evolution`, its study's figure over checkpoints (study A's circuit evolution) for every
    run that has checkpoints (their per-step results cached under `out`/cache when `out` is given,
    so the runs are only read);
    `page`: `analyses.report.page.write_report`'s page options (`interp study-a demo` opens with
    study A's answer and puts its own runs under "Your runs").
    """
    from analyses.report.page import write_report

    figure = None
    if evolution:
        figure = partial(_evolution_or_accuracy, progress=progress, folder=folder, out=out)
    return write_report(folder, out, figure=figure, **page)


def _evolution_or_accuracy(run_dir: Path, *, progress: bool, folder: Path, out: Path | None) -> Any:
    """Its study's figure over checkpoints where the run kept them (committed results keep none),
    else the accuracy curves.
    """
    from analyses.report.page import accuracy_figure, study_sections
    from interp.store import list_checkpoints

    if list_checkpoints(run_dir):
        cache = None if out is None else out / "cache" / Path(run_dir).relative_to(folder)
        for study in study_sections():
            figure = None if study.evolution is None else study.evolution(run_dir, cache, progress)
            if figure is not None:
                return figure
    return accuracy_figure(run_dir)


_EXECUTORS = click.Choice(["local", "slurm", "submitit-local"])


@click.command()
@click.option(
    "--grid",
    default="demo",
    show_default=True,
    help="A named grid (demo, study-a, study-c) or a grid .json file.",
)
@click.option(
    "--set", "axes", multiple=True, help="Sweep a field: FIELD=V1,V2 (task or training field; repeatable)."
)
@click.option("--seeds", type=int, default=None, help="Seeds per configuration [default: the grid's].")
@click.option("--epochs", type=int, default=None, help="Epochs per run [default: the grid's].")
@click.option(
    "--out", type=click.Path(file_okay=False), required=True, help="Sweep folder (created, or resumed)."
)
@click.option("--executor", type=_EXECUTORS, default="local", show_default=True, help="Where runs execute.")
@click.option("--jobs", type=int, default=None, help="Local runs in parallel [default: one per core].")
@click.option(
    "--threads",
    type=int,
    default=None,
    help="torch threads per run [default: $OMP_NUM_THREADS if set, else cores / jobs].",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Where each run trains: cpu, cuda, cuda:1, ... (with --jobs N, N runs share one GPU).",
)
@click.option("--partition", default=None, help="Slurm partition.")
@click.option("--timeout-min", type=int, default=240, show_default=True, help="Slurm time limit per run.")
@click.option(
    "--report/--no-report", default=True, show_default=True, help="Write the HTML report at the end."
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def sweep(
    grid,
    axes,
    seeds,
    epochs,
    out,
    executor,
    jobs,
    threads,
    device,
    partition,
    timeout_min,
    report,
    no_progress,
) -> None:
    """Train a grid of runs (finished runs are skipped, interrupted ones resume), then report.

    \b
    Examples:
      interp sweep --grid demo --out runs/demo
      interp sweep --grid study-a --set r=0.5,0.9 --seeds 10 --out runs/a --executor slurm --partition gpu
      interp sweep --grid study-a-capacity --out runs/capacity --device cuda --jobs 8
    """
    from interp.cli.train import check_device

    out_dir = Path(out)
    check_device(device, here=executor == "local")  # a cluster job finds its GPU there
    the_grid = load_grid(grid, seeds=seeds, epochs=epochs, axes=list(axes))
    runner = make_executor(
        executor, jobs=jobs, threads=threads, folder=out_dir, partition=partition, timeout_min=timeout_min
    )
    finished, failures = run_grid(the_grid, out_dir, runner, progress=not no_progress, device=device)
    click.echo(f"{finished} runs finished in {out_dir}")
    if report:
        click.echo(f"report: {write_sweep_report(out_dir, evolution=False, progress=not no_progress)}")
    if failures:
        from interp.errors import RunsFailed

        again = "the other runs went on; run the same command to resume it from its last checkpoint"
        raise RunsFailed("\n".join(f"{line} ({again})" for line in failures))


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Where to write report.html, rates.csv and runs.csv (FOLDER is then only read) [default: FOLDER].",
)
@click.option(
    "--evolution/--no-evolution",
    default=False,
    show_default=True,
    help="Per-run circuit-evolution figures for runs with checkpoints (study A; computes and caches "
    "fingerprints and gradients per checkpoint, in the run folders or, with --out, under OUT/cache; an "
    "LLC curve that `interp evolve --analysis llc` cached in a run is drawn with its stage boundaries).",
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def report(folder: str, out: str | None, evolution: bool, no_progress: bool) -> None:
    """Report the sweeps in FOLDER (one sweep, or a results folder with several below it): what
    was run, milestone rates with Wilson intervals, and every run, finished or not.

    \b
    Examples:
      interp report runs/demo
      interp report results/study-a --out /tmp/study-a-report
    """
    from interp.store.handle import writable

    if out is None and not writable(Path(folder)):
        raise ConfigError(f"{folder} cannot be written (read-only)", "give --out FOLDER for the report")
    path = write_sweep_report(
        Path(folder), evolution=evolution, progress=not no_progress, out=Path(out) if out else None
    )
    click.echo(f"report: {path}")
