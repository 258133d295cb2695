"""`interp stages`: stage boundaries in a run's metrics or an `evolve` table (`interp.stages`)."""

from __future__ import annotations

import csv
from pathlib import Path

import click

from interp.errors import ConfigError, did_you_mean

METHODS = ("llc", "changepoint", "rise")  # interp.stages.boundaries.METHODS, without numpy
SLOPES = ("log-step", "checkpoint")  # interp.stages.boundaries.SLOPES


@click.command()
@click.option(
    "--run",
    "run_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="A run folder: its metrics.jsonl.",
)
@click.option(
    "--table",
    type=click.Path(dir_okay=False),
    default=None,
    help="An evolve table (OUT/ANALYSIS.csv) instead of --run.",
)
@click.option(
    "--column", "columns", multiple=True, required=True, help="A series to read (repeat for several)."
)
@click.option(
    "--method", type=click.Choice(METHODS), default="changepoint", show_default=True, help="The rule."
)
@click.option(
    "--smooth", type=click.FloatRange(min=0), default=1.0, show_default=True, help="llc: Gaussian width."
)
@click.option(
    "--slope",
    type=click.Choice(SLOPES),
    default="log-step",
    show_default=True,
    help="llc: slope per log-step, or per checkpoint (series whose spacing changes).",
)
@click.option(
    "--min-size", type=click.IntRange(min=1), default=2, show_default=True, help="Shortest plateau/segment."
)
@click.option(
    "--penalty", type=click.FloatRange(min=0), default=None, help="changepoint: PELT penalty [4 k s^2 log T]."
)
@click.option(
    "--n-boundaries", type=click.IntRange(min=1), default=None, help="changepoint: exactly this many."
)
@click.option("--target", type=float, default=1.0, show_default=True, help="rise: the level risen to.")
@click.option(
    "--out", type=click.Path(file_okay=False), default=None, help="Write stages.csv and figure.html here."
)
@click.option("--log-x", is_flag=True, help="Log step axis in the figure.")
def stages(
    run_dir: str | None,
    table: str | None,
    columns: tuple[str, ...],
    method: str,
    smooth: float,
    slope: str,
    min_size: int,
    penalty: float | None,
    n_boundaries: int | None,
    target: float,
    out: str | None,
    log_x: bool,
) -> None:
    """Find stage boundaries (critical points of a smoothed LLC curve, ruptures change points, or
    find_rise's onset) in a run's metrics or an evolve table, and print the stages.

    \b
    Examples:
      interp stages --run runs/a --column adv/acc --column val/acc
      interp evolve --run runs/a --analysis llc --out ev && interp stages --table ev/llc.csv --column llc --method llc
    """
    if slope != "log-step" and method != "llc":
        raise ConfigError(
            f"--slope {slope} applies to --method llc only", "add --method llc, or leave --slope out"
        )
    if (run_dir is None) == (table is None):
        raise ConfigError("give one of --run or --table", "a run folder's metrics, or an evolve table")
    if table is not None:
        if not Path(table).is_file():
            raise ConfigError(f"--table {table!r} is not a file", "an evolve table: OUT/ANALYSIS.csv")
        with open(table, newline="") as handle:
            header = next(csv.reader(handle), [])
        _check_columns(columns, header, table)
    else:
        from interp.store.handle import RunHandle

        records = RunHandle(Path(run_dir)).metrics()
        _check_columns(columns, sorted({k for r in records for k in r}), run_dir)
    import pandas as pd

    from interp.stages.boundaries import find_stages

    data = pd.read_csv(table) if table is not None else records
    found = find_stages(
        data, columns, method=method, smooth=smooth, slope=slope, min_size=min_size, penalty=penalty,
        n_boundaries=n_boundaries, target=target,
    )  # fmt: skip
    click.echo(f"stages by {method} of {', '.join(columns)}: boundaries at {found.boundaries or 'none'}")
    click.echo(found.to_frame().to_string(index=False))
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        found.to_frame().to_csv(folder / "stages.csv", index=False)
        found.figure(log_x=log_x).write_html(folder / "figure.html", include_plotlyjs="directory")
        click.echo(f"saved to {folder}")


def _check_columns(columns: tuple[str, ...], valid: list[str], where: str) -> None:
    """Refuse a column the table or metrics do not have (before numpy and pandas load)."""
    for column in columns:
        if column not in valid:
            raise ConfigError(f"--column {column!r} is not in {where}", did_you_mean(column, valid))
