"""Checks of a command's arguments that need no model, run before torch is imported.

A misspelled split or a run folder that is missing, damaged or being written should be
refused in a fraction of a second, not after the seconds that importing torch and
TransformerLens take. Everything here reads only folder names and JSON (`interp.store.layout`,
`interp.store.run_folder`) and task configs (`tasks`, torch-free); the command itself checks
the same things again with its own code, so a check missed here is caught there, only later.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from interp.errors import CheckpointError, ConfigError, InterpError, did_you_mean
from interp.store.layout import list_checkpoints, read_manifest, resolve_checkpoint
from interp.store.run_folder import read_config, run_of


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


def check_analysis_args(args: Sequence[str]) -> None:
    """Check an analysis command's raw arguments (`--ckpt`, `--split`, `--splits`) before it loads.

    Args:
        args: The arguments after the command name, as typed.

    Raises:
        CheckpointError: If the checkpoint or run folder is missing or damaged.
        ConfigError: If a split is not one of the run's.
    """
    if {"-h", "--help"} & set(args):
        return
    for ckpt in option_values(args, "--ckpt")[-1:]:  # click keeps the last one given
        ckpt_dir = resolve_checkpoint(ckpt)
        read_manifest(ckpt_dir, run_of(ckpt_dir))
        config = read_config(run_of(ckpt_dir))
        check_splits(config, "--split", option_values(args, "--split")[-1:])
        lists = option_values(args, "--splits")[-1:]
        check_splits(config, "--splits", [s.strip() for text in lists for s in text.split(",") if s.strip()])


def check_evolve_args(run_dir: str, params: dict[str, Any]) -> None:
    """Check the run folder and split parameters of `interp evolve` (and `interp study-a evolution`)
    before the analysis loads.

    Args:
        run_dir: The run folder given to ``--run``.
        params: The analysis parameters given with ``--param`` (name -> text).

    Raises:
        CheckpointError: If the run folder is missing, damaged or has no checkpoint.
        ConfigError: If a split parameter is not one of the run's.
    """
    steps = list_checkpoints(run_dir)
    if not steps:
        raise CheckpointError(f"{run_dir} has no checkpoints to evolve over", "train it first (interp train)")
    config = read_config(run_dir)
    if "split" in params:
        check_splits(config, "--param split", [params["split"]])
    if "splits" in params:
        check_splits(config, "--param splits", [s.strip() for s in params["splits"].split(",") if s.strip()])


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
