"""Study A's committed dissection series (results/study-a/series/): each is the run its
preregistered rule picks, retrained on the record's machine, equal to that record bit for bit.
"""

from __future__ import annotations

import json
from pathlib import Path

from analyses.studies.study_a.series_choice import FOLDERS, MAX_CHECKPOINTS, committed_series, dissection_runs
from interp.store import list_checkpoints
from interp.store.run_folder import read_metrics, run_machines

ROOT = Path(__file__).resolve().parents[4]
RESULTS = ROOT / "results" / "study-a"


def _config(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())
    config["train"].pop("checkpoint_every")  # the retrain's only change: denser checkpoints
    return config


def test_each_committed_series_is_its_rules_run_and_equals_its_record():
    committed = {name: RESULTS / "series" / folder for name, folder in FOLDERS.items()}
    committed = {name: folder for name, folder in committed.items() if folder.is_dir()}
    assert committed, "no dissection series is committed yet"
    for name, folder in committed.items():
        (machine,) = run_machines(folder)  # one machine trained the whole retrain
        choice = {c.name: c for c in dissection_runs(RESULTS, machine)}[name]
        assert choice.run is not None, f"{name}: the records do not settle its run ({choice.why})"
        record = choice.run.spec.out
        assert run_machines(record) == [machine]
        assert read_metrics(folder) == read_metrics(record), f"{folder.name} differs from {record}"
        assert _config(folder) == _config(record)
        assert 2 <= len(list_checkpoints(folder)) <= MAX_CHECKPOINTS


def test_the_pages_table_of_series_names_each_ones_record_and_milestones():
    rows = {row["series"]: row for row in committed_series(RESULTS)}
    assert list(rows) == list(FOLDERS)
    for name, row in rows.items():
        folder = RESULTS / row["folder"]
        assert row["committed"] == folder.is_dir()
        if row["committed"]:
            assert read_metrics(RESULTS / row["record"]) == read_metrics(folder)
            assert row["checkpoints"] == len(list_checkpoints(folder))
            done = json.loads((folder / "DONE").read_text())
            assert row["rule"] == done["milestones"]["rule"]["step"]
    assert any(row["committed"] for row in rows.values())
