"""The `interp` command line: the composition root of the toolkit.

Thin by design: parse, load, call the same function a notebook calls, save, print a short
table. Commands load on first use (`interp.cli.group`), and heavy imports (torch,
TransformerLens) happen inside them, so `interp --help` starts in well under a second.
`interp.cli` is the only part of `interp` that may import `models`, `tasks` and `analyses`.

Exit codes: 0 ok, 1 runtime failure (a full disk, a diverged run, a failed sweep run), 2 bad
usage or bad input, 128 + the signal on a stop signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). No
traceback unless `--debug`. The library's notes (`interp.errors.Note`) print as one ``note:``
line each.
"""

from __future__ import annotations

import errno
import sys
import traceback
import warnings

import click

from interp.cli.group import CommandGroup
from interp.errors import (
    InterpError,
    Note,
    RunsFailed,
    TrainingDiverged,
    TrainingInterrupted,
)

EXIT_RUNTIME, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


@click.group(
    cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="interp")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Train, checkpoint and dissect small models on synthetic tasks."""
    ctx.obj = {"debug": debug}


def _show_note(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    if issubclass(category, Note):
        click.echo(f"note: {message}", err=True)
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI and map errors to exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    warnings.showwarning = _show_note
    try:
        cli.main(args=argv, prog_name="interp", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        click.echo(usage_line(err), err=True)
        sys.exit(EXIT_USAGE)
    except InterpError as err:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {err} [see docs/errors.md#{err.anchor}]", err=True)
        sys.exit(EXIT_USAGE)
    except TrainingInterrupted as err:
        click.echo(f"interrupted: {err}; {err.resume}", err=True)
        sys.exit(128 + err.signum)
    except (TrainingDiverged, RunsFailed) as err:  # one line per run
        click.echo("\n".join(f"error: {line}" for line in str(err).splitlines()), err=True)
        sys.exit(EXIT_RUNTIME)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except OSError as err:
        if debug:
            traceback.print_exc()
        click.echo(os_error_line(err), err=True)
        sys.exit(EXIT_RUNTIME)
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if debug:
            traceback.print_exc()
        click.echo(f"error: {type(err).__name__}: {err} (run with --debug for the traceback)", err=True)
        sys.exit(EXIT_RUNTIME)
    sys.exit(0)


def usage_line(err: click.ClickException) -> str:
    """The one line a usage error prints: the command, what was wrong and what would be valid.

    Click's own display takes three lines (usage, a pointer to --help, the error); an unknown
    option here also lists the command's options, so the line says what would be valid.
    """
    message = err.format_message().rstrip(".")
    context = getattr(err, "ctx", None)
    if context is None:
        return f"error: {message}"
    if isinstance(err, click.NoSuchOption):
        guess = f" (did you mean {' or '.join(map(repr, err.possibilities))}?)" if err.possibilities else ""
        valid = sorted(
            {name for param in context.command.params for name in param.opts if name.startswith("--")}
        )
        message = f"no such option {err.option_name!r}{guess}; its options: {', '.join(valid)}"
    elif isinstance(context.command, click.Group) and message.startswith("No such command"):
        message += f"; its commands: {', '.join(context.command.list_commands(context))}"
    return f"error: {context.command_path}: {message} (see '{context.command_path} --help')"


def os_error_line(err: OSError) -> str:
    """The one line a failed file operation prints (a full disk says what to do next)."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" writing {err.filename}" if err.filename else ""
        return (
            f"error: no space left on the device{where}; the last complete checkpoint is intact: "
            "free some space and run the same command to resume"
        )
    return f"error: {type(err).__name__}: {err} (run with --debug for the traceback)"


if __name__ == "__main__":
    main()
