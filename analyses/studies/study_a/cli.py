"""`interp study-a`: study A's door on the command line (`evolution`, `describe`, `demo`, `decide`).

A study's `cli.py` belongs to the composition root (`interp.cli` lists it lazily in
`analyses.studies.STUDIES`): the one module of a study that may import `interp.cli`'s helpers.
"""

from __future__ import annotations

from pathlib import Path

import click

from interp.errors import ConfigError, did_you_mean


@click.group("study-a")
def study_a() -> None:
    """Study A (the positional shortcut): a run's circuit evolution, its data and model, the demo, the readings."""


@study_a.command("evolution")
@click.option("--run", "run_dir", type=click.Path(file_okay=False), required=True, help="A run folder.")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Output folder, and its cache/ of per-step results [default: RUN/evolution, cache RUN/analyses].",
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def study_a_evolution(run_dir: str, out: str | None, no_progress: bool) -> None:
    """Study A's circuit-evolution figure and checkpoint explorer of one run (fingerprints and
    gradient groups over every checkpoint, cached per step): OUT/circuit_evolution.html and
    OUT/explorer.html.
    """
    from interp.cli.preflight import check_evolve_args
    from interp.store.handle import writable

    check_evolve_args(run_dir, {})
    folder = Path(out) if out else Path(run_dir) / "evolution"
    cache = folder / "cache" if out else None  # with --out, nothing is written into the run
    if out is None and not writable(folder):
        raise ConfigError(f"{run_dir} cannot be written (read-only)", "give --out FOLDER")
    folder.mkdir(parents=True, exist_ok=True)
    from analyses.report.plots import write_figure
    from analyses.studies.study_a.evolution import attention_explorer, circuit_evolution_figure

    write_figure(
        circuit_evolution_figure(run_dir, progress=not no_progress, cache=cache),
        folder / "circuit_evolution.html",
    )
    write_figure(attention_explorer(run_dir, cache=cache), folder / "explorer.html")
    click.echo(f"wrote {folder / 'circuit_evolution.html'} and {folder / 'explorer.html'}")


@study_a.command("decide")
@click.argument("results", type=click.Path(file_okay=False), required=False)
@click.option(
    "--tables",
    is_flag=True,
    help="Also the descriptive readings: robustness per cell, and the onset signature.",
)
def study_a_decide(results: str | None, tables: bool) -> None:
    """The preregistered readings of study A's decision grids from their records (RESULTS: a folder
    holding wd-headline/ and replication/ [default: the committed results/study-a]): weight decay
    or imbalance (stage 1), and the replication (stage 2); "incomplete" while a run is missing.
    With --tables, the page's robustness and gradient-signature tables too.
    """
    from analyses.studies.study_a.decision import RESULTS, decision, replication

    folder = Path(results) if results else RESULTS
    if not folder.is_dir():
        raise ConfigError(f"{results} is not a folder", "give a folder holding wd-headline/ and replication/")
    click.echo(f"weight decay or imbalance: {decision(folder).sentence()}")
    click.echo(f"replication: {replication(folder).sentence()}")
    if tables:
        from analyses.report.records import FINISHED
        from analyses.studies.study_a.decision import decision_runs
        from analyses.studies.study_a.onset_signature import signature_summary, signature_table
        from analyses.studies.study_a.robustness import robustness_table

        runs = decision_runs(folder)
        if not any(run.status == FINISHED for run in runs):
            click.echo(f"\nno finished run of wd-headline/ or replication/ under {folder} to describe yet")
            return
        click.echo("\nrobustness (each reading as runs/finished runs):")
        click.echo(robustness_table(runs).set_index(["sweep", "configuration"]).T.to_string())
        click.echo("\nthe gradient signature around the onset, per cell:")
        click.echo(signature_summary(signature_table(runs)).to_string(index=False))


@study_a.command("describe")
@click.option("--label", default="sum-mod2", show_default=True, help="True rule: sum-mod2 or sum-mod3.")
@click.option("--shortcut", default="max", show_default=True, help="Spurious feature: max or first.")
@click.option(
    "--r",
    "r",
    default=0.9,
    show_default=True,
    type=float,
    help="Spurious ratio of the train split, in [0, 1].",
)
@click.option("--preset", default="mpsp-2l2h", show_default=True, help="Model preset.")
@click.option("--data-seed", default=0, show_default=True, type=int, help="Seed of the data splits.")
def study_a_describe(label: str, shortcut: str, r: float, preset: str, data_seed: int) -> None:
    """Build a study-A dataset and model and print a summary of both (sizes, ratios, hooks)."""
    from models.presets import PRESETS
    from tasks import MPSPTask

    task = MPSPTask(label=label, shortcut=shortcut, r=r)  # bad values fail here, before torch
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}", did_you_mean(preset, PRESETS))
    from interp.text import summarize_task_and_model
    from models import build_model, preset_config

    model = build_model(preset_config(preset, task))
    click.echo(summarize_task_and_model(task, task.splits(data_seed), model, preset=preset))


@study_a.command("demo")
@click.option(
    "--out", type=click.Path(file_okay=False), default="runs/demo", show_default=True, help="Sweep folder."
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def study_a_demo(out: str, no_progress: bool) -> None:
    """The main job on built-in defaults: study A's regime with one seed per cell (1 vs 2 layers,
    r = 0.5 vs 0.9; the positional shortcut, 32 values, 400 epochs) and one HTML report that opens
    with study A's answer from the committed results and the circuit evolution of a two-layer run
    that found the rule, then your runs with their circuit evolution (`make demo`). Sized to end
    within 10 minutes on 2 CPU cores: 161 s measured on an idle AVX-512 machine, about 8 minutes
    on an AVX2 one, estimated from the committed records' CPU seconds an epoch with the other core busy (two
    layers 0.305 on AVX-512, 0.75 on AVX2; one layer 0.059 on AVX-512) and the 1,000-epoch demo's
    timed 407 s and 1,005 s (`benchmarks/demo_time.py`).
    """
    import time

    from interp.cli.sweep import load_grid, make_executor, run_grid

    start = time.perf_counter()
    out_dir = Path(out)
    grid = load_grid("demo", seeds=None, epochs=None, axes=[])
    executor = make_executor("local", jobs=None, threads=None, folder=out_dir, partition=None, timeout_min=0)
    finished, failures = run_grid(grid, out_dir, executor, progress=not no_progress)
    if failures:
        raise RuntimeError("demo runs failed:\n" + "\n".join(failures))
    path = demo_report(out_dir, progress=not no_progress)
    click.echo(f"{finished} runs in {out_dir}; report: {path}  ({time.perf_counter() - start:.0f} s)")


def demo_report(out_dir: Path, *, progress: bool, results: Path | None = None) -> Path:
    """The demo's report of the sweep in `out_dir`: study A's answer from the committed records
    (`results`, default the checkout's), a two-layer run that found the rule, then "Your runs"
    (every run's circuit evolution; no contrast test: one seed a cell, nothing preregistered).
    """
    from analyses.studies.study_a.demo import RESULTS, answer_section, phase2_section
    from analyses.studies.study_a.report import SECTION_WITHOUT_TESTS
    from interp.cli.sweep import write_sweep_report

    results = RESULTS if results is None else results
    preface = answer_section(results) + phase2_section(out_dir, progress=progress, results=results)
    runs_head = [
        "<h2>Your runs</h2>",
        "<p>The demo's own runs: one seed in each cell (1 vs 2 layers, r = 0.5 vs 0.9). One seed "
        "says how a run can go, not how often it does, and nothing was preregistered for these "
        "runs, so no test is run on them: study A's answer is the committed results above.</p>",
    ]
    return write_sweep_report(
        out_dir,
        evolution=True,
        progress=progress,
        preface=preface,
        runs_head=runs_head,
        title="Study A: the answer so far, and your runs (make demo)",
        studies=[SECTION_WITHOUT_TESTS],
    )
