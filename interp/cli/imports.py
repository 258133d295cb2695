"""`interp import`: a TransformerLens-convention checkpoint, or a series of them, becomes one
of our run folders (the library side: `analyses.importing`, `analyses.series_import`).
"""

from __future__ import annotations

from pathlib import Path

import click

from interp.cli.options import config_options, given
from interp.errors import ConfigError
from tasks import task_families

# Plugins' task families too (`interp.plugins`): their fields are options of this command.
_TASK_OPTIONS = config_options(*task_families().values(), defaults=False, label=lambda cls: cls.name)


@click.command(name="import")
@click.argument("source", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--series",
    type=click.Path(file_okay=False),
    default=None,
    help="Instead of SOURCE: a folder of state dicts saved every N steps (step = last digits of each file "
    "name, or DIR/series.json), imported as one run (analyses.series_import).",
)
@click.option(
    "--manifest",
    type=click.Path(dir_okay=False),
    default=None,
    help='With --series: {"checkpoints": [{"file": ..., "step": ...}]} [default: DIR/series.json if present].',
)
@click.option(
    "--task", "task_name", required=True, help="Task family the model was trained on: mpsp, modadd or noise."
)
@_TASK_OPTIONS
@click.option(
    "--data-seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the task's splits (their digests go into the run).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="TransformerLens config.json [default: in the torch file, or beside a .safetensors].",
)
@click.option(
    "--loss",
    type=click.Choice(["cross_entropy", "mse"]),
    default="cross_entropy",
    show_default=True,
    help="Loss the analyses report (the one the model was trained with).",
)
@click.option(
    "--step", default=0, show_default=True, type=int, help="Training step to file the checkpoint under."
)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Run folder to create.")
def import_(source, series, manifest, task_name, data_seed, config_path, loss, step, out, **options) -> None:
    """Bring a TransformerLens-convention checkpoint (a .pt/.pth holding a state dict and a config dict, or
    .safetensors beside a config.json) into a run folder, for the task you name; files that need pickled
    code are refused.

    \b
    Examples:
      interp import grokking.pth --task modadd --p 113 --out runs/grokking
      interp import model.safetensors --task mpsp --r 0.9 --out runs/tl-mpsp
      interp import --series ckpts/ --config ckpts/config.json --task modadd --p 11 --out runs/mine
    """
    task = {"name": task_name, **given(options, _TASK_OPTIONS.names)}
    if (source is None) == (series is None):
        raise ConfigError(
            "give a checkpoint file SOURCE or --series DIR (one of them)", "see interp import --help"
        )
    if manifest is not None and series is None:
        raise ConfigError("--manifest lists the files of a --series", "give --series DIR too")
    if series is not None:
        from analyses.series_import import import_series

        done = import_series(
            series, task, out, data_seed=data_seed, loss=loss, config_path=config_path, manifest=manifest
        )
        accuracy = ", ".join(f"{k} {v:.3f}" for k, v in done["final"].items() if k.endswith("/acc"))
        click.echo(f"imported {len(done['steps'])} checkpoints of {series} into {out} (last: {accuracy})")
        return
    from analyses.importing import import_checkpoint

    summary = import_checkpoint(
        Path(source),
        task,
        Path(out),
        data_seed=data_seed,
        step=step,
        loss=loss,
        config_path=Path(config_path) if config_path else None,
    )
    accuracy = ", ".join(f"{k} {v:.3f}" for k, v in summary["final"].items() if k.endswith("/acc"))
    click.echo(f"imported {source} into {out} (step {summary['step']}); {accuracy}")
