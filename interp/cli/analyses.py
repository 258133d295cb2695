"""The analysis commands: one per registered analysis (`interp patch`, `interp grads`, ...),
generated from its `Params` dataclass when invoked, plus `interp evolve` and `interp describe`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from analyses.registry import REGISTRY
from interp.cli.options import config_params
from interp.cli.preflight import check_evolve_args, opened_run
from interp.errors import ConfigError, did_you_mean
from interp.store.handle import writable


def analysis_command(name: str) -> click.Command:
    """Build the click command of analysis `name` from its `Params` fields."""
    from analyses import get_analysis

    analysis = get_analysis(name)

    def run(ckpt: str, out: str | None, force_data: bool, allow_nonfinite: bool, **values: Any) -> None:
        from analyses import load_subject

        # The run the argument check opened before torch loaded: its config is not read again.
        subject = load_subject(opened_run(ckpt), force_data=force_data, allow_nonfinite=allow_nonfinite)
        try:
            params = analysis.params(**values)
        except TypeError as err:
            raise ConfigError(str(err)) from None
        folder = Path(out) if out else subject.run.result_folder(name, subject.step)
        if out is None and not writable(folder):
            raise ConfigError(
                f"the run folder of {subject.source} cannot be written (read-only), so the result has no "
                "default place",
                "give --out FOLDER (an analysis never writes into the run otherwise)",
            )
        result = analysis.compute(subject, params)
        result.save(folder)
        click.echo(f"{name} of {subject.source} (step {subject.step})\n{result.table()}\nsaved to {folder}")

    options = [
        click.Option(
            ["--ckpt"],
            required=True,
            type=click.Path(),
            help="A run folder (its latest checkpoint) or a checkpoint folder.",
        ),
        click.Option(
            ["--out"],
            default=None,
            type=click.Path(file_okay=False),
            help="Result folder [default: RUN/analyses/NAME/step_N]; the only place written.",
        ),
        click.Option(
            ["--force-data"],
            is_flag=True,
            help="Analyse even if the rebuilt data's digests differ from the checkpoint's (a note names both).",
        ),
        click.Option(
            ["--allow-nonfinite"],
            is_flag=True,
            help="Load weights that hold NaN or inf (a diverged or foreign checkpoint; refused by default).",
        ),
    ]
    options += config_params(analysis.params)
    return click.Command(
        name, callback=run, params=options, help=analysis.summary, short_help=analysis.summary
    )


@click.command()
@click.option("--run", "run_dir", type=click.Path(file_okay=False), required=True, help="A run folder.")
@click.option(
    "--analysis", default=None, help="A registered analysis to evolve [default: study A's circuit figure]."
)
@click.option(
    "--param",
    "params",
    multiple=True,
    help="An analysis parameter, NAME=VALUE (repeatable), e.g. split=train or frequencies=14,35.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Output folder, and its cache/ of per-step results [default: RUN/evolution, cache RUN/analyses].",
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def evolve(
    run_dir: str, analysis: str | None, params: tuple[str, ...], out: str | None, no_progress: bool
) -> None:
    """Run an analysis over every checkpoint of a run (cached per step), or draw study A's
    circuit-evolution figure and checkpoint explorer.
    """
    if analysis is not None and analysis not in REGISTRY:  # the message get_analysis gives, before torch
        raise ConfigError(f"unknown analysis {analysis!r}", did_you_mean(analysis, REGISTRY))
    given = {
        name.strip().replace("-", "_"): text.strip() for name, _, text in (p.partition("=") for p in params)
    }
    run = check_evolve_args(run_dir, given)  # opened once: the analysis reads its config from it
    from analyses import get_analysis
    from analyses.evolution import evolve as evolve_run

    folder = Path(out) if out else Path(run_dir) / "evolution"
    cache = folder / "cache" if out else None  # with --out, nothing is written into the run
    if out is None and not writable(folder):
        raise ConfigError(f"{run_dir} cannot be written (read-only)", "give --out FOLDER")
    folder.mkdir(parents=True, exist_ok=True)
    if analysis is None:
        from analyses.studies.plots import write_figure
        from analyses.studies.study_a import attention_explorer, circuit_evolution_figure

        write_figure(
            circuit_evolution_figure(run_dir, progress=not no_progress, cache=cache),
            folder / "circuit_evolution.html",
        )
        write_figure(attention_explorer(run_dir, cache=cache), folder / "explorer.html")
        click.echo(f"wrote {folder / 'circuit_evolution.html'} and {folder / 'explorer.html'}")
        return
    entry = get_analysis(analysis)
    evolution = evolve_run(
        run, entry, params_from_strings(entry, params), progress=not no_progress, cache=cache
    )
    frame = evolution.to_frame()
    frame.to_csv(folder / f"{analysis}.csv", index=False)
    click.echo(f"{analysis} over {len(evolution.steps)} checkpoints -> {folder / f'{analysis}.csv'}")


@click.command()
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
def describe(label: str, shortcut: str, r: float, preset: str, data_seed: int) -> None:
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


def params_from_strings(analysis: Any, items: tuple[str, ...] | list[str]) -> Any:
    """Build `analysis.params` from ``NAME=VALUE`` strings (``interp evolve --param``).

    Values are converted to the field's type (``true``/``false`` for flags); unknown names and
    values that do not convert are `ConfigError`s naming them.
    """
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(analysis.params)}
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in fields:
            raise ConfigError(
                f"--param {item!r} is not NAME=VALUE with a parameter of {analysis.name}",
                did_you_mean(name, fields),
            )
        kind = type(fields[name].default)
        try:
            values[name] = _BOOLS[text.strip().lower()] if kind is bool else kind(text)
        except (KeyError, ValueError):
            raise ConfigError(f"--param {item!r}: {text!r} is not a {kind.__name__}") from None
    return analysis.params(**values)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
