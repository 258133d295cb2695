"""`interp study-c`: study C's door on the command line (`report`).

A study's `cli.py` belongs to the composition root (`interp.cli` lists it lazily in
`analyses.studies.STUDIES`): the one module of a study that may import `interp.cli`'s helpers.
"""

from __future__ import annotations

import click


@click.group("study-c")
def study_c() -> None:
    """Study C (label-noise grokking): tables and figures of the noise and weight-decay sweeps."""


@study_c.command("report")
@click.argument("sweep", type=click.Path(file_okay=False))
@click.option(
    "--wd",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Folder of `interp sweep --grid study-c-wd`.",
)
@click.option(
    "--out", type=click.Path(file_okay=False), default=None, help="Output folder [default: SWEEP/study_c]."
)
@click.option("--ipr", is_flag=True, help="Also draw the IPR evolution of seed 0 at every xi.")
@click.option(
    "--train",
    "grid",
    default=None,
    help="First train this grid into SWEEP, seed by seed (all xi of seed 0 first).",
)
@click.option("--epochs", type=int, default=None, help="With --train: epochs per run [default: the grid's].")
def study_c_report(
    sweep: str, wd: str | None, out: str | None, ipr: bool, grid: str | None, epochs: int | None
) -> None:
    """The xi table against the reference, t_gen vs xi, the weight-decay regimes (SWEEP: `--grid study-c`)."""
    from analyses.studies.study_c.report import train_seed_major, write_study_c
    from analyses.studies.study_c.tables import markdown_table, runs_table, xi_table

    if grid is not None:
        click.echo(f"{train_seed_major(grid, sweep, epochs=epochs)} runs failed")
    folder = write_study_c(sweep, wd, out, ipr=ipr)
    click.echo(markdown_table(xi_table(runs_table(sweep))))
    click.echo(f"wrote {folder}")
