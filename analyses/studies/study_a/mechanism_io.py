"""The mechanism test's runs and records: which run folders it reads, what it commits, what the
docs page shows (`analyses.studies.study_a.mechanism` computes it).

The positional-shortcut side is the map's `mpsp-2l2h` r = 0.9 runs at V*, the max-shortcut side
the runs of `--grid study-a-mechanism-max`; `find_runs` picks them out of a sweep folder by
their configs, so neither the folder layout nor a stray run of another cell can mix in. The
record is small (a CSV of the probe at every checkpoint, the per-run and per-shortcut tables,
the verdict); the figure is drawn from it (`load_record`), so docs rebuild from a clone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.studies.study_a.mechanism import MechanismResult, summarise_runs, summarise_shortcuts, verdict
from analyses.studies.study_a.mechanism_figure import mechanism_figure
from interp.errors import ConfigError
from interp.store import is_done, read_config
from interp.store.atomic import atomic_write_json, atomic_write_text

PRESET = {"n_layers": 2, "n_heads": 2}
RATIO = 0.9
PROBE_FILE, RUNS_FILE, SUMMARY_FILE = "probe.csv", "runs.csv", "summary.json"


def find_runs(folder: str | Path, shortcut: str, vocab: int) -> tuple[list[Path], list[Path]]:
    """The finished and the unfinished two-layer, two-head r = 0.9 runs below `folder` with this
    shortcut and vocabulary, each in path order.

    Raises:
        ConfigError: If `folder` is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", "give the sweep folder that holds the runs")
    done, unfinished = [], []
    for config_file in sorted(folder.rglob("config.json")):
        run = config_file.parent
        config = read_config(run)
        model, task = config.get("model", {}), config.get("task", {})
        if (
            all(model.get(k) == v for k, v in PRESET.items())
            and task.get("shortcut") == shortcut
            and task.get("vocab") == vocab
            and task.get("r") == RATIO
        ):
            (done if is_done(run) else unfinished).append(run)
    return done, unfinished


def write_record(result: MechanismResult, out: str | Path, notes: dict[str, Any] | None = None) -> Path:
    """Write the committed record of a mechanism test into `out`: `PROBE_FILE` (every run and
    checkpoint), `RUNS_FILE` (per run, under the preregistered rule) and `SUMMARY_FILE` (the
    parameters, per-shortcut counts, verdict and `notes`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / PROBE_FILE, result.to_frame().to_csv(index=False, float_format="%.6g"))
    runs = result.run_summary()
    atomic_write_text(out / RUNS_FILE, runs.to_csv(index=False, float_format="%.6g"))
    summary = {
        "params": result.params,
        "per_shortcut": json.loads(result.summary().to_json(orient="records")),
        "verdict": result.verdict(),
        **(notes or {}),
    }
    atomic_write_json(out / SUMMARY_FILE, summary)
    return out


def load_record(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any]] | None:
    """The probe table and the summary of a committed record, or None if it is not there yet."""
    folder = Path(folder)
    if not (folder / PROBE_FILE).is_file() or not (folder / SUMMARY_FILE).is_file():
        return None
    frame = pd.read_csv(folder / PROBE_FILE)
    frame["onset"] = frame["onset"].astype("Int64")
    return frame, json.loads((folder / SUMMARY_FILE).read_text())


def docs_section(folder: str | Path) -> list[Any]:
    """What the "mechanism test" section of docs/study_a.md shows: a note that the results are
    not in yet, or the per-shortcut table with the verdict, the per-run table and the figure.
    """
    from IPython.display import HTML, Markdown

    record = load_record(folder)
    if record is None:
        return [
            Markdown(
                "*The results are not in yet:* the max-shortcut runs wait for V*, and the test is "
                "run once they and the map's runs at V* have finished."
            )
        ]
    frame, summary = record
    threshold = summary["params"]["threshold"]
    runs = summarise_runs(frame, threshold)
    shortcuts = summarise_shortcuts(runs)
    return [
        Markdown(f"**Verdict under the preregistered rule: {verdict(shortcuts)}.**"),
        HTML(_scrolling(shortcuts.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-"))),
        HTML(_scrolling(runs.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-"))),
        mechanism_figure(frame, threshold),
    ]


def _scrolling(table: str) -> str:
    """A wide table in a box that scrolls sideways (the per-run table is wider than a docs page)."""
    return f'<div style="overflow-x: auto; max-width: 100%">{table}</div>'
