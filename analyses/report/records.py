"""Reports of sweeps: what was run, milestone rates with Wilson intervals, and every run's state.

A *results folder* is any folder with ``sweep.json`` files below it: one sweep written by
`interp sweep`, or several (study A's regime search and its confirmatory grid). A run folder
needs only ``config.json``, ``metrics.jsonl`` and, once finished, ``DONE``; checkpoints are
optional, so committed results (``results/study-a/...``) report from a fresh clone. Nothing
here writes into the results folder (`report_page.write_report` writes where it is told).

* `load_results(folder)`: every sweep below `folder` and each run's state: finished (its
  ``DONE`` summary), unfinished (its last epoch and best accuracies so far, from the metrics)
  or not started.
* `rate_table(runs)`: per configuration (sweep and coordinates but the seed) and milestone
  (study A: ``generalized``, ``rule``, ``memorized``; study C: ``t_mem_clean``, ``t_gen``...),
  the runs that reached it, the rate with its Wilson 95% interval, kept vs transient, and the
  median epoch at which it was reached.
* `rate_markdown(folder)`: that table as markdown, the form the docs pages quote (a docs test
  compares a page's table with it).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from scipy.stats import binomtest

from interp.errors import ConfigError, note
from interp.metrics import milestones as milestones_of
from interp.store.layout import CONFIG_FILE
from interp.store.run_folder import is_done, read_done, read_metrics
from interp.sweep.specs import SWEEP_FILE, RunSpec, read_sweep
from tasks import task_family

FINISHED, UNFINISHED, NOT_STARTED = "finished", "unfinished", "not started"
# A run whose loss or weights became NaN or inf: it stopped there (its DONE says where); it is
# listed apart and left out of the rates.
DIVERGED = "diverged"


@dataclass(frozen=True)
class Sweep:
    """One sweep of a results folder.

    Attributes:
        name: Its folder relative to the results folder (``"."`` when it is the folder).
        folder: Its folder.
        specs: Its runs.
        meta: What `interp sweep` recorded (the grid).
    """

    name: str
    folder: Path
    specs: list[RunSpec]
    meta: dict[str, Any]


@dataclass(frozen=True)
class RunState:
    """Where one run stands.

    Attributes:
        sweep: The sweep's name.
        spec: The run's spec.
        status: ``finished``, ``diverged``, ``unfinished`` or ``not started``.
        epoch: The last evaluated epoch (None before the first evaluation).
        final: The last metrics record (empty before the first evaluation).
        best: The best value of every accuracy so far (``"adv/acc"`` -> 0.42).
        milestones: The milestones: from ``DONE`` once finished, from the metrics so far before.
        diverged: For a diverged run, where: ``{"step", "tensor", "value", "checkpoint"}``.
    """

    sweep: str
    spec: RunSpec
    status: str
    epoch: int | None
    final: dict[str, Any]
    best: dict[str, float]
    milestones: dict[str, dict[str, Any]]
    diverged: dict[str, Any] | None = None

    @property
    def config(self) -> dict[str, Any]:
        """The run's coordinates but the seed (its configuration)."""
        return {k: v for k, v in self.spec.tags.items() if k != "seed"}


def find_sweeps(folder: str | Path) -> list[Sweep]:
    """Every sweep at or below `folder`, in path order.

    Raises:
        ConfigError: If `folder` holds no ``sweep.json``.
    """
    folder = Path(folder)
    files = sorted(folder.rglob(SWEEP_FILE))
    if not files:
        raise ConfigError(
            f"{folder} holds no {SWEEP_FILE}",
            "give a sweep folder (interp sweep --out) or a folder of sweeps",
        )
    sweeps = []
    for path in files:
        specs, meta = read_sweep(path.parent)
        sweeps.append(Sweep(path.parent.relative_to(folder).as_posix(), path.parent, specs, meta))
    return sweeps


def milestone_targets(task_name: str | None) -> dict[str, tuple[str, float]]:
    """The milestones of the task family `task_name` (``{name: (metric, threshold)}``), built-in or
    a plugin's (`tasks.task_family`).

    A family that cannot be resolved here (its plugin not installed, or registered in another
    process) has none: a finished run's milestones are still read from its DONE, and a note
    says why the unfinished runs have none.
    """
    if not task_name:
        return {}
    try:
        family = task_family(task_name)
    except ConfigError as err:  # PluginError too: the report still shows what the runs recorded
        note(f"no milestones for the task {task_name!r}: {err}")
        return {}
    return dict(getattr(family, "milestones", {}))


def run_state(sweep: str, spec: RunSpec) -> RunState:
    """The state of one run, read from its folder (never written)."""
    started = (spec.out / CONFIG_FILE).is_file()  # an empty folder (e.g. a bare export) has not started
    records = read_metrics(spec.out) if started else []
    best: dict[str, float] = {}
    for record in records:
        for key, value in record.items():
            if key.endswith("/acc") and isinstance(value, (int, float)):
                best[key] = max(best.get(key, value), value)
    final = records[-1] if records else {}
    targets = milestone_targets(spec.task.get("name"))
    if is_done(spec.out):
        summary = read_done(spec.out)
        # Milestones added to the task after the run finished are read from its metrics.
        reached = {**milestones_of(records, targets), **summary["milestones"]}
        status = DIVERGED if "diverged" in summary else FINISHED
        return RunState(
            sweep,
            spec,
            status,
            summary["epochs"],
            summary["final"],
            best,
            reached,
            summary.get("diverged"),
        )
    status = UNFINISHED if records or started else NOT_STARTED
    return RunState(sweep, spec, status, final.get("step"), final, best, milestones_of(records, targets))


def load_results(folder: str | Path) -> tuple[list[Sweep], list[RunState]]:
    """Every sweep below `folder` and the state of each of their runs."""
    sweeps = find_sweeps(folder)
    return sweeps, [run_state(s.name, spec) for s in sweeps for spec in s.specs]


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (scipy's implementation).

    Raises:
        ValueError: If `n` is 0 (a rate of no runs has no interval; say so instead).
    """
    if n == 0:
        raise ValueError("a rate over 0 runs has no interval")
    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return ci.low, ci.high


def configurations(runs: list[RunState]) -> dict[tuple, list[RunState]]:
    """Runs grouped by (sweep, coordinates but the seed), in the order they first appear."""
    groups: dict[tuple, list[RunState]] = defaultdict(list)
    for run in runs:
        groups[(run.sweep, *run.config.items())].append(run)
    return dict(groups)


def milestone_rates(group: list[RunState]) -> list[dict[str, Any]]:
    """For each milestone of a configuration's runs: finished, reached, rate, Wilson CI, kept, median epoch.

    Rates are over the finished runs (an unfinished run may still reach a milestone, a diverged
    one is counted apart); with no finished run the rate and its interval are None and
    `format_rate` says so.
    """
    finished = [r for r in group if r.status == FINISHED]
    diverged = sum(r.status == DIVERGED for r in group)
    rows = []
    for name in dict.fromkeys(name for r in group for name in r.milestones):
        scored = [r.milestones[name] for r in finished if name in r.milestones]
        reached = [m for m in scored if m["step"] is not None]
        n, k = len(scored), len(reached)
        low, high = wilson(k, n) if n else (None, None)
        kept = sum(bool(m["kept"]) for m in reached)
        rows.append(
            {
                "milestone": name,
                "runs": len(group),
                "finished": n,
                "diverged": diverged,
                "reached": k,
                "rate": k / n if n else None,
                "ci_low": low,
                "ci_high": high,
                "kept": kept,
                "transient": k - kept,
                "median epoch": statistics.median(m["step"] for m in reached) if reached else None,
            }
        )
    return rows


def rate_table(runs: list[RunState]) -> pd.DataFrame:
    """The rates of every configuration (`milestone_rates`), one row per configuration and milestone."""
    rows = [
        {"sweep": sweep, **dict(coords), **rates}
        for (sweep, *coords), group in configurations(runs).items()
        for rates in milestone_rates(group)
    ]
    return pd.DataFrame(rows)


def runs_frame(runs: list[RunState]) -> pd.DataFrame:
    """One row per run: sweep, coordinates, status, last epoch, final and best accuracies, milestones."""
    rows = []
    for run in runs:
        row: dict[str, Any] = {"sweep": run.sweep, **run.spec.tags, "status": run.status, "epoch": run.epoch}
        if run.diverged:
            row |= {"diverged epoch": run.diverged["step"], "diverged tensor": run.diverged["tensor"]}
        row |= {f"final {k}": v for k, v in run.final.items() if k.endswith("/acc") and k.count("/") == 1}
        row |= {
            f"best {k}": v for k, v in run.best.items() if k.count("/") == 1 and not k.startswith("train")
        }
        for name, m in run.milestones.items():
            row |= {f"{name} epoch": m["step"], f"{name} kept": m["kept"] if m["step"] is not None else None}
        rows.append(row)
    return pd.DataFrame(rows)


def percent(value: float) -> str:
    """``0.658`` -> ``"66%"``."""
    return f"{100 * value:.0f}%"


def accuracy_percent(value: float) -> str:
    """An accuracy as a percentage that never rounds onto 100% or 0%: ``0.997`` -> ``"99.7%"``.

    A run at adv 0.997 has not reached the rule (100%); "100%" beside "never rule" would read
    as a contradiction.
    """
    if 0.995 <= value < 1:
        return f"{math.floor(1000 * value) / 10:.1f}%"
    if 0 < value < 0.005:
        return f"{math.ceil(1000 * value) / 10:.1f}%"
    return percent(value)


def format_rate(reached: int, n: int) -> str:
    """``"77% [52%, 92%], 10 runs"``: the rate, its Wilson 95% interval and how many runs."""
    if n == 0:
        return "no finished run yet"
    low, high = wilson(reached, n)
    return f"{percent(reached / n)} [{percent(low)}, {percent(high)}], {n} run{'s' if n != 1 else ''}"


def format_epoch(step: float | None) -> str:
    """An epoch for readers: ``4,200``; ``never`` for a milestone no run reached."""
    return "never" if step is None or step != step else f"{step:,.0f}"


def format_when(row: Any) -> str:
    """Kept vs transient and the median epoch of one rate-table row, e.g.
    ``"5 kept, 2 transient; median epoch 4,200"``, or ``"never"``.
    """
    if not row["reached"]:
        return "never"
    return (
        f"{row['kept']} kept, {row['transient']} transient; median epoch {format_epoch(row['median epoch'])}"
    )


def config_label(config: dict[str, Any]) -> str:
    """``{"preset": "mpsp-2l2h", "r": 0.9}`` -> ``"mpsp-2l2h, r = 0.9"``."""
    parts = [str(v) if k == "preset" else f"{k} = {v}" for k, v in config.items()]
    return ", ".join(parts) or "all runs"


def rate_rows(runs: list[RunState]) -> list[dict[str, str]]:
    """The rate table for readers: one row per configuration, a rate and a when per milestone."""
    rows = []
    for (sweep, *coords), group in configurations(runs).items():
        unfinished = sum(r.status not in (FINISHED, DIVERGED) for r in group)
        diverged = sum(r.status == DIVERGED for r in group)
        row = {"sweep": sweep, "configuration": config_label(dict(coords))}
        row["runs"] = _runs_text(len(group), unfinished, diverged)
        for rates in milestone_rates(group):
            name = rates["milestone"]
            row[name] = format_rate(rates["reached"], rates["finished"])
            row[f"{name}: when"] = format_when(rates) if rates["finished"] else "-"
        rows.append(row)
    return rows


def _runs_text(total: int, unfinished: int, diverged: int = 0) -> str:
    """``"10"``, or ``"10 (2 unfinished, 1 diverged)"``."""
    notes = [f"{n} {what}" for n, what in ((unfinished, "unfinished"), (diverged, "diverged")) if n]
    return f"{total}" + (f" ({', '.join(notes)})" if notes else "")


def rate_markdown(folder: str | Path) -> str:
    """The rate table of every sweep below `folder` as a markdown table (what docs pages quote)."""
    rows = rate_rows(load_results(folder)[1])
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(row.get(c, "-") for c in columns) + " |")
    return "\n".join(lines) + "\n"
