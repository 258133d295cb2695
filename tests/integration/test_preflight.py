"""Fail fast (`interp.cli.preflight`): every bad-input error that needs no model comes before
torch and TransformerLens are imported, as one line with exit code 2.

Each case runs the real CLI entry point in a fresh interpreter (imports made by this test
process cannot leak in) and reads `sys.modules` there after the command has exited, so the
check is deterministic, not a timing. `benchmarks/cli_errors.py` times the same cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyses.recipes import plan_runs
from interp.store.layout import CHECKPOINTS_DIR
from interp.store.run_folder import create_run, run_lock

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformer_lens")
# Runs `interp.cli.main(argv)`, then prints which heavy modules that process imported.
DRIVER = (
    "import json, sys\n"
    "from interp.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
    f"print(json.dumps({{'code': code, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))"
)


def run_fresh(*args: str) -> tuple[int, list[str], list[str]]:
    """Exit code, heavy modules imported, and stderr lines of `interp ARGS` in a new interpreter."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], report["heavy"], [line for line in done.stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Run folders as training leaves them, without weights (no check here reads them):
    `run` (a study-A config and one checkpoint's manifest), `damaged` (config.json cut short),
    `broken` (its checkpoint's manifest cut short), `empty` (a config, no checkpoint).
    """
    root = tmp_path_factory.mktemp("runs")
    run = create_run(root / "run", plan_runs("mpsp-2l2h", {"r": 0.9}, {}, None, root / "run")[0].config())
    ckpt = run / CHECKPOINTS_DIR / "step_000000"
    ckpt.mkdir(parents=True)
    manifest = {"format_version": 1, "step": 0, "files": {"model.safetensors": "0" * 64}, "meta": {}}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    (run / CHECKPOINTS_DIR / "LATEST").write_text("step_000000\n")
    damaged = root / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text((run / "config.json").read_text()[:40])
    broken = create_run(root / "broken", json.loads((run / "config.json").read_text()))
    (broken / CHECKPOINTS_DIR / "step_000000").mkdir(parents=True)
    (broken / CHECKPOINTS_DIR / "step_000000" / "manifest.json").write_text(json.dumps(manifest)[:30])
    (broken / CHECKPOINTS_DIR / "LATEST").write_text("step_000000\n")
    empty = create_run(root / "empty", json.loads((run / "config.json").read_text()))
    return {
        "run": run,
        "damaged": damaged,
        "broken": broken,
        "empty": empty,
        "missing": root / "missing",
        "new": root / "new",
    }


# (arguments with {run}-style folder names, a fragment the one line must contain)
CASES = [
    (["train", "--preset", "mpsp-2l2", "--out", "{new}"], "unknown preset 'mpsp-2l2'"),
    (["train", "--label", "sum-mod4", "--out", "{new}"], "label = 'sum-mod4' is not valid"),
    (["train", "--r", "1.5", "--out", "{new}"], "r = 1.5 is invalid"),
    (["train", "--epochs", "0", "--out", "{new}"], "epochs = 0 is invalid"),
    (["train", "--resume", "{missing}"], "missing"),
    (["train", "--resume", "{damaged}"], "is not valid JSON"),
    (["train", "--preset", "mpsp-2l2h", "--r", "0.5", "--out", "{run}"], "task.r is 0.9 there but 0.5 now"),
    (["study-a", "describe", "--label", "sum-mod4"], "label = 'sum-mod4' is not valid"),
    (["study-a", "describe", "--preset", "nope"], "unknown preset 'nope'"),
    (["patch", "--ckpt", "{missing}", "--split", "adv"], "does not exist"),
    (["patch", "--ckpt", "{broken}"], "manifest.json is not valid JSON"),
    (["fingerprint", "--ckpt", "{empty}"], "has no checkpoint yet"),
    (["patch", "--ckpt", "{run}", "--split", "avd"], "--split 'avd' is not a split of this run"),
    (["grads", "--ckpt={run}", "--split=trian"], "did you mean 'train'?"),
    (["ablate", "--ckpt", "{run}", "--splits", "train,test"], "--splits 'test' is not a split"),
    (["evolve", "--run", "{missing}", "--analysis", "fingerprint"], "does not exist"),
    (["evolve", "--run", "{empty}", "--analysis", "fingerprint"], "has no checkpoints to evolve over"),
    (["evolve", "--run", "{run}", "--analysis", "fingerprnt"], "unknown analysis 'fingerprnt'"),
    (["evolve", "--run", "{run}", "--analysis", "patch", "--param", "split=avd"], "'avd' is not a split"),
    (["study-a", "evolution", "--run", "{missing}"], "does not exist"),
    (["study-a", "evolution", "--run", "{empty}"], "has no checkpoints to evolve over"),
]


@pytest.mark.parametrize("args, fragment", CASES, ids=[" ".join(a[:3]) for a, _ in CASES])
def test_bad_input_fails_before_torch_in_one_line(runs, args, fragment):
    code, heavy, lines = run_fresh(*(a.format(**runs) for a in args))
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert fragment in lines[0]
    assert heavy == [], f"imported {heavy} before the error: {lines[0]}"


def test_a_locked_run_fails_before_torch(runs):
    with run_lock(runs["run"]):  # held by this process, as a training process would hold it
        code, heavy, lines = run_fresh("train", "--resume", str(runs["run"]))
    assert code == 2 and len(lines) == 1, lines
    assert f"pid {os.getpid()}" in lines[0] and "being written by another process" in lines[0]
    assert heavy == []


def test_the_evolve_error_leaves_no_folder_behind(runs):
    run_fresh("evolve", "--run", str(runs["missing"]), "--analysis", "fingerprint")
    assert not runs["missing"].exists()


def test_good_input_goes_on_to_load_the_model(runs):
    """The checks let a valid request through: here the run has no weights, so the error
    comes from loading them, after torch (so the test above cannot pass by importing nothing).
    """
    code, heavy, lines = run_fresh("patch", "--ckpt", str(runs["run"]), "--split", "adv")
    assert code == 2 and "model.safetensors" in lines[-1], lines
    assert set(heavy) == set(HEAVY)
