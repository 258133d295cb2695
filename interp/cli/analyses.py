"""CLI subcommands generated from the analysis registry (`interp patch`, `interp grads`, ...).

`AnalysisGroup` lists the registry's names and summaries without importing any analysis (so
`interp --help` stays torch-free) and builds a command from an analysis's `Params` dataclass
only when that command is invoked: one option per field, with the field's help text.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click

from interp.store.run_folder import run_of
from analyses.registry import REGISTRY


class AnalysisGroup(click.Group):
    """A click group whose analysis subcommands are generated lazily from the registry."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(REGISTRY))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in REGISTRY and name not in self.commands:
            self.add_command(analysis_command(name))
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # `interp --help` lists analyses from the registry's summaries, importing none of them.
        rows = [(name, REGISTRY[name][1] if name in REGISTRY else self.commands[name].get_short_help_str(70))
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def analysis_command(name: str) -> click.Command:
    """Build the click command of analysis `name` from its `Params` fields."""
    from analyses import get_analysis
    from analyses.base import param_help

    analysis = get_analysis(name)
    helps = param_help(analysis.params)

    def run(ckpt: str, out: str | None, **values: Any) -> None:
        from analyses import load_subject
        from interp.errors import ConfigError

        subject = load_subject(ckpt)
        try:
            params = analysis.params(**values)
        except TypeError as err:
            raise ConfigError(str(err)) from None
        result = analysis.compute(subject, params)
        folder = Path(out) if out else default_out(subject.source, name)
        result.save(folder)
        click.echo(f"{name} of {subject.source} (step {subject.step})\n{result.table()}\nsaved to {folder}")

    options = [
        click.Option(["--ckpt"], required=True, type=click.Path(), help="A run folder (its latest checkpoint) or a checkpoint folder."),
        click.Option(["--out"], default=None, type=click.Path(file_okay=False),
                     help="Result folder [default: RUN/analyses/NAME/step_N]."),
    ]
    for field in dataclasses.fields(analysis.params):
        options.append(_option(field, helps[field.name]))
    return click.Command(name, callback=run, params=options, help=analysis.summary, short_help=analysis.summary)


def params_from_strings(analysis: Any, items: tuple[str, ...] | list[str]) -> Any:
    """Build `analysis.params` from ``NAME=VALUE`` strings (``interp evolve --param``).

    Values are converted to the field's type (``true``/``false`` for flags); unknown names and
    values that do not convert are `ConfigError`s naming them.
    """
    from interp.errors import ConfigError, did_you_mean

    fields = {f.name: f for f in dataclasses.fields(analysis.params)}
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in fields:
            raise ConfigError(f"--param {item!r} is not NAME=VALUE with a parameter of {analysis.name}",
                              did_you_mean(name, fields))
        kind = type(fields[name].default)
        try:
            values[name] = _BOOLS[text.strip().lower()] if kind is bool else kind(text)
        except (KeyError, ValueError):
            raise ConfigError(f"--param {item!r}: {text!r} is not a {kind.__name__}") from None
    return analysis.params(**values)


_BOOLS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _option(field: dataclasses.Field, help_text: str) -> click.Option:
    flag = "--" + field.name.replace("_", "-")
    if isinstance(field.default, bool):
        return click.Option([f"{flag}/--no-{flag[2:]}", field.name], default=field.default, show_default=True, help=help_text)
    return click.Option([flag, field.name], type=type(field.default), default=field.default, show_default=True, help=help_text)


def default_out(checkpoint: str | None, name: str) -> Path:
    """`RUN/analyses/NAME/step_N` for checkpoint `RUN/checkpoints/step_N`."""
    ckpt = Path(checkpoint or ".")
    return run_of(ckpt) / "analyses" / name / ckpt.name
