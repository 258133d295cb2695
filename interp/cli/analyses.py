"""The analysis commands: one per registered analysis (`interp patch`, `interp grads`, ...),
generated from its `Params` dataclass when invoked, plus `interp evolve` (any of them over
every checkpoint of a run). The studies' commands are in each study's `cli.py` (`analyses.studies.STUDIES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from analyses import analysis_names
from analyses.registry import REGISTRY
from interp.cli.options import config_params, params_from_strings
from interp.cli.preflight import check_evolve_args, early_params, opened_run
from interp.errors import ConfigError, did_you_mean
from interp.store.handle import writable


def analysis_command(name: str) -> click.Command:
    """Build the click command of analysis `name` from its `Params` fields."""
    from analyses import get_analysis

    analysis = get_analysis(name)

    def run(ckpt: str, out: str | None, force_data: bool, allow_nonfinite: bool, **values: Any) -> None:
        from analyses import load_subject
        from analyses.evolution import settings_folder

        # The run the argument check opened before torch loaded: its config is not read again.
        subject = load_subject(opened_run(ckpt), force_data=force_data, allow_nonfinite=allow_nonfinite)
        try:
            params = analysis.params(**values)
        except TypeError as err:
            raise ConfigError(str(err)) from None
        folder = (
            Path(out)
            if out
            else subject.run.result_folder(name, subject.step, settings=settings_folder(analysis, params))
        )
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
            help="Result folder [default: RUN/analyses/NAME/step_N, or RUN/analyses/NAME/SETTINGS/step_N for "
            "other settings than the defaults, where evolve finds it]; the only place written.",
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
    "--analysis",
    "analyses",
    multiple=True,
    help="A registered analysis to evolve; repeat it for several series in one pass (imports and the run "
    "opened once).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    help="An analysis parameter, NAME=VALUE (repeatable), e.g. split=train or frequencies=14,35; it sets "
    "NAME in every --analysis given, ANALYSIS.NAME=VALUE (e.g. grads.split=train) in that one only.",
)
@click.option(
    "--checkpoints",
    default=None,
    help="Only these checkpoints: a step range and/or steps, e.g. 100-300 or 0,100-300,1500 [default: all].",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Output folder, and its cache/ of per-step results [default: RUN/evolution, cache RUN/analyses].",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes computing the checkpoints side by side, each on its share of the threads.",
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def evolve(
    run_dir: str,
    analyses: tuple[str, ...],
    params: tuple[str, ...],
    checkpoints: str | None,
    out: str | None,
    jobs: int,
    no_progress: bool,
) -> None:
    """Run registered analyses over every checkpoint of a run (results cached per step), and
    write each one's table (one row per step and measure) as OUT/ANALYSIS.csv.

    \b
    Examples:
      interp evolve --run runs/x --analysis grads --param split=train
      interp evolve --run runs/b --analysis progress --param frequencies=14,35,41
      interp evolve --run runs/a --analysis circuit --checkpoints 100-300
      interp evolve --run runs/a --analysis fingerprint --analysis patch --analysis grads \\
          --param split=adv --param grads.split=train
    """
    if not analyses:
        raise ConfigError(
            "interp evolve needs --analysis NAME (repeatable)",
            f"one of: {', '.join(sorted(REGISTRY))}; study A's figure is interp study-a evolution --run RUN",
        )
    for analysis in analyses:  # the message get_analysis gives, before torch
        if analysis not in REGISTRY and analysis not in analysis_names():
            raise ConfigError(f"unknown analysis {analysis!r}", did_you_mean(analysis, analysis_names()))
        if analyses.count(analysis) > 1:
            raise ConfigError(
                f"--analysis {analysis} is given twice",
                "one series per analysis: evolve again for other --param",
            )
    items = _params_by_analysis(analyses, params)
    given = [
        {name.strip().replace("-", "_"): text.strip() for name, _, text in (p.partition("=") for p in own)}
        for own in items.values()
    ]
    for name, own in zip(items, given):
        early_params(name, own)  # a torch-free Params checks its values before the run opens
    run = check_evolve_args(run_dir, *given)  # opened once: every analysis reads its config from it
    steps = run.select_steps(checkpoints)  # a step without a checkpoint is refused before torch loads
    from analyses import get_analysis
    from analyses.evolution import evolve as evolve_run

    folder = Path(out) if out else Path(run_dir) / "evolution"
    cache = folder / "cache" if out else None  # with --out, nothing is written into the run
    if out is None and not writable(folder):
        raise ConfigError(f"{run_dir} cannot be written (read-only)", "give --out FOLDER")
    entries = {name: get_analysis(name) for name in analyses}
    built = {name: _built(entry, items[name], len(analyses)) for name, entry in entries.items()}  # all, first
    folder.mkdir(parents=True, exist_ok=True)
    for name, entry in entries.items():
        evolution = evolve_run(
            run, entry, built[name], checkpoints=steps, progress=not no_progress, cache=cache, jobs=jobs
        )
        evolution.to_frame().to_csv(folder / f"{name}.csv", index=False)
        click.echo(f"{name} over {len(evolution.steps)} checkpoints -> {folder / f'{name}.csv'}")


def _built(entry: Any, items: list[str], several: int) -> Any:
    """`params_from_strings`, whose error says, when several analyses are evolved, how to
    set a parameter in one of them only.
    """
    try:
        return params_from_strings(entry, items)
    except ConfigError as err:
        if several == 1:
            raise
        hint = f"{err.hint}; " if err.hint else ""
        raise ConfigError(
            err.message, f"{hint}NAME=VALUE sets every --analysis, {entry.name}.NAME=VALUE only {entry.name}"
        ) from None


def _params_by_analysis(analyses: tuple[str, ...], params: tuple[str, ...]) -> dict[str, list[str]]:
    """Each analysis's ``NAME=VALUE`` items: every unprefixed one, then its own
    ``ANALYSIS.NAME=VALUE`` ones, prefix removed (later items win, so its own win).

    Raises:
        ConfigError: If a prefix names an analysis that is not among `analyses`.
    """
    shared: list[str] = []
    own: dict[str, list[str]] = {name: [] for name in analyses}
    for item in params:
        name, sep, text = item.partition("=")
        prefix, dot, rest = name.partition(".")
        if not dot:
            shared.append(item)
        elif prefix.strip() in own:
            own[prefix.strip()].append(rest + sep + text)
        else:
            raise ConfigError(
                f"--param {item!r} is for {prefix.strip()!r}, which is not an --analysis given here",
                f"prefix it with one of: {', '.join(analyses)}",
            )
    return {name: shared + own[name] for name in analyses}
