"""Checks of a command's arguments that need no model, run before torch is imported.

A misspelled split or a run folder that is missing, damaged or being written should be
refused in a fraction of a second, not after the seconds that importing torch and
TransformerLens take. Everything here reads only folder names and JSON (`interp.store.handle`,
`interp.store.layout`) and task configs (`tasks`, torch-free). The run opened here is handed on
to the command (`opened_run`), so its config.json is read once per command; the command checks
the data again with its own code, so a check missed here is caught there, only later.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import click

from interp.errors import CheckpointError, ConfigError, InterpError, did_you_mean
from interp.store.handle import RunHandle
from interp.store.layout import read_manifest


def option_values(args: Sequence[str], flag: str) -> list[str]:
    """Every value given to `flag` in raw command-line `args` (``--flag V`` or ``--flag=V``)."""
    values = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1 :])
    return values


def check_analysis_args(args: Sequence[str]) -> RunHandle | None:
    """Check an analysis command's raw arguments (`--ckpt`, `--split`, `--splits`) before it loads.

    The run it opens (its config read once) is returned, and kept for the command (`opened_run`).

    Args:
        args: The arguments after the command name, as typed.

    Returns:
        The run of ``--ckpt``, or None when none was given (or help was asked for).

    Raises:
        CheckpointError: If the checkpoint or run folder is missing or damaged.
        ConfigError: If a split is not one of the run's.
    """
    if {"-h", "--help"} & set(args):
        return None
    for ckpt in option_values(args, "--ckpt")[-1:]:  # click keeps the last one given
        run = RunHandle.open(ckpt)
        read_manifest(run.checkpoint_path(), run.run_dir)
        check_splits(run.config, "--split", option_values(args, "--split")[-1:])
        lists = option_values(args, "--splits")[-1:]
        check_splits(
            run.config, "--splits", [s.strip() for text in lists for s in text.split(",") if s.strip()]
        )
        return _keep(ckpt, run)
    return None


def check_params_args(name: str, args: Sequence[str]) -> None:
    """Build analysis `name`'s torch-free `Params` (`analyses.registry.EARLY_PARAMS`) from its raw
    arguments, so their own checks refuse a bad value before the model loads.

    Values that do not convert to the field's type are left to click, which names them.

    Raises:
        ConfigError: From the `Params` checks (one line, naming the value and what is valid).
    """
    import dataclasses
    import importlib

    from analyses.registry import EARLY_PARAMS
    from interp.cli.options import flag_of

    if name not in EARLY_PARAMS or {"-h", "--help"} & set(args):
        return
    module, attribute = EARLY_PARAMS[name]
    params = getattr(importlib.import_module(module), attribute)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(params):
        flag = flag_of(field.name)
        given = option_values(args, flag)[-1:]
        kind = type(field.default)
        if kind is bool:  # a switch, --x / --no-x: the last one given
            switches = [a for a in args if a in (flag, f"--no-{flag[2:]}")][-1:]
            if switches:
                values[field.name] = switches[0] == flag
        elif given and kind in (int, float, str):
            try:
                values[field.name] = kind(given[0])
            except ValueError:
                continue
    params(**values)


def early_params(name: str, items: dict[str, str]) -> None:
    """Build analysis `name`'s torch-free `Params` from ``--param`` texts (`interp evolve`), if it has them."""
    import importlib
    from types import SimpleNamespace

    from analyses.registry import EARLY_PARAMS
    from interp.cli.options import params_from_strings

    if name in EARLY_PARAMS:
        module, attribute = EARLY_PARAMS[name]
        params = getattr(importlib.import_module(module), attribute)
        params_from_strings(SimpleNamespace(params=params, name=name), [f"{k}={v}" for k, v in items.items()])


def check_evolve_args(run_dir: str, *params: dict[str, Any]) -> RunHandle:
    """Check the run folder and split parameters of `interp evolve` (and `interp study-a
    evolution`) before the analysis loads.

    Args:
        run_dir: The run folder given to ``--run``.
        *params: The parameters of each analysis given with ``--param`` (name -> text).

    Returns:
        The run, opened (its config read once): hand it on to the analysis.

    Raises:
        CheckpointError: If the run folder is missing, damaged or has no checkpoint.
        ConfigError: If a split parameter is not one of the run's.
    """
    run = RunHandle(Path(run_dir))  # a run folder by the option's contract
    if not run.steps:
        raise CheckpointError(f"{run_dir} has no checkpoints to evolve over", "train it first (interp train)")
    for given in params:
        if "split" in given:
            check_splits(run.config, "--param split", [given["split"]])
        if "splits" in given:
            check_splits(
                run.config, "--param splits", [s.strip() for s in given["splits"].split(",") if s.strip()]
            )
    return run


def _keep(given: str, run: RunHandle) -> RunHandle:
    """Keep `run` for the command that will open `given` (click's context meta, shared by its children)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(_OPENED, {})[given] = run
    return run


def opened_run(given: str) -> RunHandle:
    """The run `check_analysis_args` opened for the path `given` to ``--ckpt``, else opened now."""
    ctx = click.get_current_context(silent=True)
    kept = ctx.meta.get(_OPENED, {}) if ctx is not None else {}
    return kept.get(given) or RunHandle.open(given)


_OPENED = "interp.opened_runs"


def check_splits(config: dict[str, Any], what: str, names: Iterable[str]) -> None:
    """Refuse split `names` (``all`` aside) that the run's task does not build.

    A run whose task config cannot be read here (e.g. an imported model) is left to the
    analysis, which knows its splits once it has loaded them.

    Raises:
        ConfigError: Naming the split and the run's splits.
    """
    from tasks import task_from_dict

    names = [n for n in names if n != "all"]
    if not names:
        return
    try:
        valid = getattr(task_from_dict(config["task"]), "split_names", None)
    except (KeyError, TypeError, InterpError):
        return
    for name in names:
        if valid is not None and name not in valid:
            raise ConfigError(f"{what} {name!r} is not a split of this run", did_you_mean(name, valid))
