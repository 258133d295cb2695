"""What a report says was run: per sweep its models, what varied, seeds, data, training, command.

Read from the run specs themselves (``sweep.json``), not from the grid's name, so the table is
true for any sweep; the command is the named grid (`analyses.studies.grids.GRIDS`) that, with
``--seeds`` / ``--epochs`` / ``--set`` flags, writes the same sweep, if there is one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyses.report.records import DIVERGED, FINISHED, RunState, Sweep
from interp.config import to_dict
from interp.store.run_folder import read_compute

# Training fields a reader needs to know what was run (seeds and cadences are left out).
TRAIN_FIELDS = ("epochs", "batch_size", "lr", "betas", "weight_decay", "loss", "weight_norm")
_SKIP_TRAIN = {"seed", "data_seed"}


def sweep_rows(folder: Path, sweeps: list[Sweep], runs: list[RunState]) -> list[dict[str, str]]:
    """One row per sweep: models, varied, seeds, data, training, runs, command."""
    rows = []
    for sweep in sweeps:
        mine = [r for r in runs if r.sweep == sweep.name]
        finished = sum(r.status == FINISHED for r in mine)
        diverged = sum(r.status == DIVERGED for r in mine)
        varied = _varied(sweep)
        rows.append(
            {
                "sweep": sweep.name,
                "models": ", ".join(
                    dict.fromkeys(str(s.tags.get("preset", s.model.get("kind"))) for s in sweep.specs)
                ),
                "varied": "; ".join(f"{k} in {{{', '.join(map(_text, v))}}}" for k, v in varied.items())
                or "-",
                "seeds": str(len({s.tags.get("seed") for s in sweep.specs})),
                "data": _constant_text([s.task for s in sweep.specs], set(varied)),
                "training": _training_text([s.train for s in sweep.specs], set(varied)),
                "runs": f"{len(mine)} ({finished} finished"
                + (f", {diverged} diverged)" if diverged else ")"),
                "CPU hours": _cpu_text([r.spec.out for r in mine]),
                "command": sweep_command(sweep.meta.get("grid"), (folder / sweep.name).as_posix()),
            }
        )
    return rows


def _cpu_text(run_dirs: list[Path]) -> str:
    """``"3.52 (38 of 40 runs recorded)"``: the CPU hours summed over the runs that record them.

    A run's CPU time is its ``compute.json``: written by training (`TrainLoop.record_cpu`), or for
    runs trained by an interp that did not, by ``scripts/export_results.py --cpu-ledger``.
    """
    recorded = [s for s in map(read_compute, run_dirs) if s is not None]
    if not recorded:
        return "not recorded"
    hours = f"{sum(recorded) / 3600:.2f}"
    return (
        hours
        if len(recorded) == len(run_dirs)
        else f"{hours} ({len(recorded)} of {len(run_dirs)} runs recorded)"
    )


def _varied(sweep: Sweep) -> dict[str, list[Any]]:
    """The coordinates that take more than one value across the sweep (but the seed)."""
    values: dict[str, list[Any]] = {}
    for spec in sweep.specs:
        for key, value in spec.tags.items():
            if key != "seed" and value not in values.setdefault(key, []):
                values[key].append(value)
    return {k: v for k, v in values.items() if len(v) > 1}


def _text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(map(_text, value)) + ")"
    return str(value)


def _constant_text(configs: list[dict[str, Any]], varied: set[str]) -> str:
    """``"mpsp: label sum-mod2, r varies, vocab 16, ..."``: the fields every run shares."""
    first = configs[0]
    parts = [str(first.get("name", ""))]
    for key, value in first.items():
        if key == "name" or key in varied:
            continue
        same = all(c.get(key) == value for c in configs)
        parts.append(f"{key} {_text(value)}" if same else f"{key} varies")
    return ", ".join(p for p in parts if p)


def _training_text(configs: list[dict[str, Any]], varied: set[str]) -> str:
    first = configs[0]
    parts = []
    for key in TRAIN_FIELDS:
        if key not in first or key in varied:
            continue
        value = first[key]
        if not all(c.get(key) == value for c in configs):
            parts.append(f"{key} varies")
        elif key == "batch_size":
            parts.append("full batch" if value is None else f"batch {value:,}")
        elif value is not None:
            parts.append(f"{key} {_text(value)}")
    extra = sorted({k for c in configs for k in c} - set(TRAIN_FIELDS) - _SKIP_TRAIN - varied)
    return ", ".join(parts) + (f" (and {len(extra)} cadence settings)" if extra else "")


def sweep_command(grid: dict[str, Any] | None, out: str) -> str:
    """The `interp sweep` command that writes this sweep, if a named grid (plus flags) does."""
    from analyses.studies.grids import GRIDS

    if grid is None:
        return "-"
    grid = _json(grid)
    for name, named in GRIDS.items():
        flags = _flags(_json(to_dict(named)), grid)
        if flags is not None:
            return " ".join(["interp sweep --grid", name, *flags, "--out", out])
    return f"interp sweep --grid GRID.json --out {out}  (GRID.json: the grid in {out}/sweep.json)"


def _flags(named: dict[str, Any], grid: dict[str, Any]) -> list[str] | None:
    """The flags that turn the named grid into `grid`, or None if flags cannot."""
    named_train = {k: v for k, v in named.get("train", {}).items() if k != "epochs"}
    train = {k: v for k, v in grid.get("train", {}).items() if k != "epochs"}
    fixed = ("presets", "task", "sweep_seed")
    if named_train != train or any(named.get(k) != grid.get(k) for k in fixed):
        return None
    flags = []
    if grid.get("seeds") != named.get("seeds"):
        flags += ["--seeds", str(grid.get("seeds"))]
    epochs = grid.get("train", {}).get("epochs")
    if epochs != named.get("train", {}).get("epochs"):
        if epochs is None:
            return None
        flags += ["--epochs", str(epochs)]
    axes, named_axes = grid.get("axes", {}), named.get("axes", {})
    if set(named_axes) - set(axes):
        return None
    for key, values in axes.items():
        if named_axes.get(key) != values:
            flags += ["--set", f"{key}={','.join(json.dumps(v) for v in values)}"]
    return flags


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))
