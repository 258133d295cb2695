"""The `interp` command group: every command is imported only when it runs or shows its help.

`interp --help` lists the built-in commands (from `COMMANDS`' summaries), the registered
analyses (from the registry's summaries), plugins' analyses (by name and package, from their
entry points, `interp.plugins`) and the studies' command groups (`STUDIES`) without importing
any of them, so it starts in a
fraction of a second with no torch, numpy or TransformerLens import. Running a command imports
its module (its options are generated from the config dataclasses there); an analysis command
is built from its `Params` (`interp.cli.analyses.analysis_command`). Commands that moved
(`MOVED`) still run under their old names for one release, saying where they went.
"""

from __future__ import annotations

import importlib
import keyword

import click

from analyses import plugin_analyses
from analyses.registry import REGISTRY
from analyses.studies import STUDIES

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("interp.cli.train", "Train a model on a task into a run folder (resumable)."),
    "sweep": (
        "interp.cli.sweep",
        "Train a grid of runs (finished runs skipped, interrupted ones resumed), then report.",
    ),
    "report": (
        "interp.cli.sweep",
        "Write a report of sweeps or results: rates with Wilson intervals, every run.",
    ),
    "evolve": (
        "interp.cli.analyses",
        "Run a registered analysis over every checkpoint of a run (cached per step).",
    ),
    "stages": (
        "interp.cli.stages",
        "Stage boundaries in a run's metrics or an evolve table: LLC critical points, change points, onsets.",
    ),
    "import": (
        "interp.cli.imports",
        "Bring a TransformerLens-convention checkpoint into a run folder (no pickled code).",
    ),
}
"""Built-in command name -> (its module, the one-line summary `interp --help` shows)."""

MOVED: dict[str, str] = {
    "demo": "study-a demo",
    "describe": "study-a describe",
    "inject": "study-b inject",
    "wlmd": "study-b wlmd",
}
"""Old spellings kept for one release: old command -> where it moved (it prints so, then runs).

"""


class CommandGroup(click.Group):
    """A click group whose commands (built-in and registered analyses) load on first use."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        """Built-in commands, registered and plugins' analyses, and studies, sorted (moved spellings
        are not listed; plugins are named from their entry points, not imported).
        """
        known = set(COMMANDS) | set(REGISTRY) | set(plugin_analyses()) | set(STUDIES)
        return sorted((set(super().list_commands(ctx)) | known) - set(MOVED))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command `name`, importing its module (or building the analysis) on first use."""
        if name not in self.commands:
            if name in MOVED:
                self.add_command(self._moved(ctx, name), name)
            elif name in COMMANDS or name in STUDIES:
                module = importlib.import_module({**COMMANDS, **STUDIES}[name][0])
                attribute = name.replace("-", "_")
                self.add_command(
                    getattr(module, attribute + "_" if keyword.iskeyword(attribute) else attribute), name
                )
            elif name in REGISTRY or name in plugin_analyses():
                from interp.cli.analyses import analysis_command

                self.add_command(analysis_command(name))
        return super().get_command(ctx, name)

    def _moved(self, ctx: click.Context, old: str) -> click.Command:
        """A hidden command `old` that says where it moved, then runs the command there."""
        path = MOVED[old].split()
        target = self.get_command(ctx, path[0])
        for name in path[1:]:
            target = target.get_command(ctx, name)

        def run(**values: object) -> object:
            moved_note(old, MOVED[old])
            return target.callback(**values)

        return click.Command(
            old,
            callback=run,
            params=target.params,
            help=f"Moved to `interp {MOVED[old]}` (this spelling goes in the next release).\n\n{target.help}",
            hidden=True,
        )

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Check an analysis command's run folder and splits (torch-free) before loading it."""
        if args and (args[0] in REGISTRY or args[0] in plugin_analyses()) and not ctx.resilient_parsing:
            from interp.cli.preflight import check_analysis_args, check_params_args

            check_params_args(args[0], args[1:])
            check_analysis_args(args[1:])
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the toolkit's commands, then its analyses, then the studies, importing none of them."""
        listed = self.list_commands(ctx)
        analyses = {**REGISTRY, **plugin_analyses()}
        for title, table in (("Commands", COMMANDS), ("Analyses", analyses), ("Studies", STUDIES)):
            with formatter.section(title):
                formatter.write_dl([(name, summary(name)) for name in listed if name in table])
        with formatter.section("Moved (the old spellings still run, until the next release)"):
            formatter.write_dl([(old, f"now: interp {new}") for old, new in MOVED.items()])


def moved_note(old: str, new: str) -> None:
    """The one line an old spelling prints before it runs (on stderr, like every note)."""
    click.echo(
        f"note: `interp {old}` moved to `interp {new}`; the old spelling goes in the next release", err=True
    )


def summary(name: str) -> str:
    """The one-line summary of command `name`, read without importing it."""
    if name in COMMANDS or name in REGISTRY or name in STUDIES:
        return {**COMMANDS, **REGISTRY, **STUDIES}[name][1]
    plugin = plugin_analyses()[name]
    return f"A plugin analysis from {plugin.describe()} (see 'interp {name} --help')."
