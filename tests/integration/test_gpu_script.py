"""scripts/gpu/study_a.sh (study A's confirmatory grid) and scripts/gpu/study_b.sh (study B's
protocol 2, 10 seeds with vectorised walkers), the GPU paths, in their CPU dry runs.

Each script is what a GPU session runs once; here the same commands run at tiny scale on the
CPU, so a broken option, folder layout or report step fails in `make test`, not on the GPU.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interp.cli import main
from interp.store import load_checkpoint, read_done
from interp.sweep.specs import read_sweep

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "study_a.sh"
STUDY_B = SCRIPT.with_name("study_b.sh")


def test_the_dry_run_trains_four_vectorised_groups_and_reports(tmp_path):
    out = tmp_path / "grid"
    env = {**os.environ, "PYTHON": sys.executable, "EPOCHS": "4"}
    result = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--dry-run"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "trained 4 groups" in result.stdout
    for preset in ("mpsp-2l2h", "mpsp-1l1h"):
        for r in ("0.9", "0.5"):
            specs, _ = read_sweep(out / preset / f"r={r}")
            assert [s.tags["seed"] for s in specs] == [0, 1]
            assert {s.tags["preset"] for s in specs} == {preset} and {s.tags["r"] for s in specs} == {
                float(r)
            }
            for spec in specs:
                done = read_done(spec.out)
                assert done["epochs"] == 4 and set(done["milestones"]) == {
                    "generalized",
                    "rule",
                    "memorized",
                    "generalized-99",
                    "rule-99",
                }
    # One report over the four groups: every configuration a row of its rates table.
    with open(out / "rates.csv") as table:
        rows = list(csv.DictReader(table))
    cells = {(row["preset"], float(row["r"])) for row in rows if row["milestone"] == "rule"}
    assert cells == {(p, r) for p in ("mpsp-2l2h", "mpsp-1l1h") for r in (0.9, 0.5)}
    assert all(row["runs"] == "2" and row["finished"] == "2" for row in rows)
    assert (out / "report.html").is_file()


def test_the_study_b_dry_run_measures_two_seeds_side_by_side_with_vectorised_walkers(tmp_path, capsys):
    out = tmp_path / "b"
    env = {**os.environ, "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(STUDY_B), str(out), "--dry-run"], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "measured seeds 0 1" in result.stdout
    settings = json.loads((out / "settings.json").read_text())
    assert (
        settings["wlmd"]["engine"] == "vectorized" and settings["wlmd"]["target_cosine"] == 0.9
    )  # protocol 2
    for seed in (0, 1):
        folder = out / f"seed_{seed}"
        walk = json.loads((folder / "wlmd" / "entropy" / "config.json").read_text())["wlmd"]
        assert walk["engine"] == "vectorized" and walk["seed"] == seed
        S = load_checkpoint(folder / "wlmd" / "entropy").train_state["wlmd"]["S"]
        assert S.shape[0] == 2  # two walkers moved together
        injections = sorted(p.name for p in folder.glob("inject-*") if (p / "DONE").exists())
        assert injections == [
            f"inject-{m}-{n}" for m in ("adamw", "wlmd") for n in ("random", "square", "sum")
        ]
        assert (out / "records" / f"seed_{seed}" / "walk.json").is_file()
    # The export's tables, printed by `interp study-b records`: both seeds' rows.
    assert "| random | 0 |" in result.stdout and "| random | 1 |" in result.stdout
    # The folder records its engine: the same settings with the loop are refused (one line,
    # exit 2), as is a device torch does not know.
    loop = {**settings, "wlmd": {k: v for k, v in settings["wlmd"].items() if k != "engine"}}
    command = ["study-b", "measure", str(out), "--seeds", "0", "--preset", "protocol-2", "--runs-only"]
    for extra, message in (
        ([], "(wlmd.engine: 'vectorized', now 'loop') (add --vectorize, use a new folder"),
        (["--vectorize", "--device", "gpu0"], "'gpu0' is not a device"),
    ):
        with pytest.raises(SystemExit) as info:
            main([*command, "--settings", json.dumps(loop), *extra])
        err = capsys.readouterr().err
        assert info.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_the_study_b_script_refuses_an_unknown_option(tmp_path):
    result = subprocess.run(
        ["bash", str(STUDY_B), str(tmp_path / "b"), "--dryrun"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "unknown option '--dryrun' (valid: --dry-run)" in result.stderr


def test_study_b_measure_refuses_table_only_with_runs_only(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["study-b", "measure", str(tmp_path / "b"), "--table-only", "--runs-only"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--table-only and --runs-only exclude each other" in err
    assert not (tmp_path / "b").exists()
