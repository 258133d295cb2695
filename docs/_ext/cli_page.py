"""Sphinx extension: the command-line page (`docs/cli.md`), generated from the click group.

Every command, subcommand and option of `interp`, with its help, type and default, comes from
`interp.cli.cli` itself (whose options are generated from the config dataclasses), so the page
cannot miss a command or show a stale default. Written when the build starts (git-ignored).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the page generator itself runs without Sphinx (the tests use it)
    from sphinx.application import Sphinx

INTRO = """# Command line

`interp --help` lists the commands; `interp COMMAND --help` their options. Every command exits
0 on success, 1 on a runtime failure, 2 on bad usage or bad input (with a one-line message that
names the value and what would be valid), and 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP while training).
`interp --debug COMMAND ...` shows full tracebacks.

This page is generated from the commands themselves. The registered analyses (`interp patch`,
`interp grads`, ...) each have a page of their own: see [Analyses](analyses/index.md).
"""


def commands(
    group: click.Group, ctx: click.Context, prefix: str = "interp"
) -> list[tuple[str, click.Command]]:
    """Every command under `group` as ``(full name, command)``, subcommands after their group."""
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append((f"{prefix} {name}", command))
        if isinstance(command, click.Group):
            found += commands(command, click.Context(command, parent=ctx, info_name=name), f"{prefix} {name}")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section(name: str, command: click.Command, ctx: click.Context) -> str:
    """One command's section: its help text and a table of its arguments and options."""
    rows = []
    for param in command.params:
        if isinstance(param, click.Argument):
            rows.append(f"| `{param.name.upper()}` | argument | | |")
            continue
        flags = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        value = param.get_default(ctx, call=False)
        # click leaves an unset default as its own sentinel (required and repeatable options).
        unset = (
            value is None
            or type(value).__name__ == "Sentinel"
            or value == ()
            or param.is_flag
            and value is False
        )
        default = "" if unset else f"`{value!r}`"
        kind = "flag" if param.is_flag else param.type.name + (f" x {param.nargs}" if param.nargs > 1 else "")
        rows.append(f"| {flags} | {_cell(kind)} | {default} | {_cell(param.help or '')} |")
    text = (command.help or "").replace("\b\n", "")
    table = "| option | type | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows) if rows else ""
    return f"## `{name}`\n\n{text}\n\n{table}\n"


def moved() -> str:
    """The section on moved spellings (`interp.cli.group.MOVED`): they still run, for one release."""
    from interp.cli.group import MOVED

    rows = [f"| `interp {old}` | `interp {new}` |" for old, new in MOVED.items()]
    rows.append("| `interp evolve --run RUN` (no `--analysis`) | `interp study-a evolution --run RUN` |")
    return (
        "## Moved commands\n\nThese old spellings still run, after one line saying where the command "
        "went; they go in the next release.\n\n| old | now |\n|---|---|\n" + "\n".join(rows) + "\n"
    )


def page() -> str:
    """The whole page: the introduction, every command except the generated analyses, the moves."""
    from analyses.registry import REGISTRY
    from interp.cli import cli

    ctx = click.Context(cli, info_name="interp")
    parts = [INTRO]
    for name, command in commands(cli, ctx):
        if name.split()[1] not in REGISTRY:
            parts.append(section(name, command, ctx))
    parts.append(moved())
    return "\n".join(parts)


def _generate(app: Sphinx) -> None:
    (Path(app.srcdir) / "cli.md").write_text(page())


def setup(app: Sphinx) -> dict:
    """Register the page generator with Sphinx."""
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "version": "1"}
