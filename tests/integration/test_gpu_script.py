"""scripts/gpu/study_a.sh (study A's stage (b) grids) and scripts/gpu/study_b.sh (study B's
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


STAGE_B = ("study-a-capacity", "study-a-wd", "study-a-ternary", "study-a-max", "study-a-vocab64")


@pytest.mark.parametrize(
    "grids",
    [
        # Two grids and a bad name: the sweeps, the carry-on after a failure and the report.
        pytest.param(
            ("study-a-wd", "no-such-grid", "study-a-vocab64"), id="two-and-a-failure", marks=pytest.mark.slow
        ),
        pytest.param(None, id="the-default-five", marks=pytest.mark.slow),
    ],
)
def test_the_dry_run_sweeps_stage_b_grids_with_their_own_seeds_and_reports(tmp_path, grids):
    """Each stage (b) grid is swept by name (its seeds and data seeds, not the script's), every
    run finishes, a grid that fails does not stop the others, and one report covers them all.
    """
    from analyses.grids import expand
    from analyses.studies.grids import GRIDS

    out = tmp_path / "grid"
    env = {**os.environ, "PYTHON": sys.executable, "EPOCHS": "4"}
    if grids is not None:
        env["GRIDS"] = " ".join(grids)
    result = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--dry-run"], env=env, capture_output=True, text=True, timeout=900
    )
    good = STAGE_B if grids is None else tuple(g for g in grids if g in GRIDS)
    if grids is None:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode == 1 and "failed: no-such-grid" in result.stderr, (
            result.stdout + result.stderr
        )
    assert f"trained {len(grids or STAGE_B)} grids" in result.stdout
    for name in good:
        specs, _ = read_sweep(out / name)
        full = {_cell(s): s for s in expand(GRIDS[name], tmp_path / "x")}
        assert len(specs) == len(full) // GRIDS[name].seeds  # the first seed of every cell
        for spec in specs:
            twin = full[_cell(spec)]
            assert (
                spec.train["seed"] == twin.train["seed"]
                and spec.train["data_seed"] == twin.train["data_seed"]
            )
            assert spec.task == {**twin.task, "n_train": 128, "n_val": 32, "n_adv": 32}
            assert read_done(spec.out)["epochs"] == 4
    with open(out / "rates.csv") as table:
        rows = [row for row in csv.DictReader(table) if row["milestone"] == "rule"]
    assert {row["sweep"] for row in rows} == set(good) and all(row["finished"] == "1" for row in rows)
    assert (out / "report.html").is_file()


def test_the_study_a_script_sweeps_the_preregistered_stage_b_grids_by_default():
    text = SCRIPT.read_text()
    default = text.split('read -ra grids <<<"${GRIDS:-', 1)[1].split("}", 1)[0].split()
    assert tuple(default) == STAGE_B


def _cell(spec):
    return spec.tags["preset"], spec.task["r"], spec.task["vocab"], spec.tags["seed"]


def test_the_study_a_script_refuses_an_unknown_option(tmp_path):
    result = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--dryrun"], capture_output=True, text=True)
    assert result.returncode == 2 and "valid: --dry-run" in result.stderr


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
    assert "walker_starts" not in settings and settings["target_flatness"] == 0.8  # as first written
    for seed in (0, 1):
        folder = out / f"seed_{seed}"
        walk = json.loads((folder / "wlmd" / "entropy" / "config.json").read_text())["wlmd"]
        assert walk["engine"] == "vectorized" and walk["seed"] == seed
        S = load_checkpoint(folder / "wlmd" / "entropy").train_state["wlmd"]["S"]
        assert S.shape[0] == 2  # two walkers moved together
        assert not (folder / "adamw-start-1").exists()  # every walker starts at the seed's model
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
    command = [
        "study-b",
        "measure",
        str(out),
        "--seeds",
        "0",
        "--preset",
        "protocol-2",
        "--runs-only",
    ]
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
