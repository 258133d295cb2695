"""The worked plugin (`examples/interp-plugin-demo`), installed the way a user installs one and
used from a fresh process: pip builds and installs it offline into a folder
(``pip install --no-index --no-deps --no-build-isolation --target T``), and a subprocess of this
interpreter with ``PYTHONPATH=T`` trains on its task from the CLI, runs its analysis from the CLI
and through ``interp evolve``, and rebuilds the subject from the run folder. Nothing here reaches
the network. The quicker in-process checks are `tests/unit/interp/test_plugins.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "interp-plugin-demo"

# Run in the subprocess: every step through `interp`'s console entry point (`interp.cli.main`,
# what the `interp` script calls), then the subject rebuilt from the run folder in Python.
DRIVER = """
import json, sys
from interp.cli import main

def cli(*args):
    try:
        main(list(args))
    except SystemExit as exit:
        if exit.code:
            raise SystemExit(f"interp {' '.join(args)} exited {exit.code}")

run, out = sys.argv[1], sys.argv[2]
cli("train", "--preset", "demo-1l", "--epochs", "20", "--eval-every", "10", "--checkpoint-every", "10",
    "--n-train", "64", "--no-progress", "--out", run)
cli("demo-norms", "--ckpt", run, "--out", out + "/norms")
cli("evolve", "--run", run, "--analysis", "demo-norms", "--analysis", "rank", "--no-progress",
    "--out", out + "/evolution")

from analyses import load_subject
import interp_plugin_demo
subject = load_subject(run, step=10)
print(json.dumps({"task": subject.task.to_dict(), "splits": sorted(subject.splits), "step": subject.step,
                  "plugin_file": interp_plugin_demo.__file__}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INTERP_NO_PLUGINS"}
    return {**env, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def test_the_demo_plugin_installs_offline_and_works_from_a_fresh_process(tmp_path):
    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside the sources
    shutil.copytree(DEMO, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
         "--quiet", "--target", str(target), str(source)],
        capture_output=True, text=True, env=_env(), timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    (info,) = target.glob("interp_plugin_demo-0.1.0.dist-info")
    assert "demo-max = interp_plugin_demo.task:DemoMaxTask" in (info / "entry_points.txt").read_text()

    env = _env(PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]))
    listing = subprocess.run(
        [sys.executable, "-m", "interp", "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert listing.returncode == 0, listing.stderr
    assert "demo-norms" in listing.stdout and "interp-plugin-demo 0.1.0" in listing.stdout

    run, out = tmp_path / "run", tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(run), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rebuilt = json.loads(done.stdout.strip().splitlines()[-1])
    assert rebuilt["task"] == {"name": "demo-max", "vocab": 8, "n": 3, "n_train": 64, "n_val": 128}
    assert rebuilt["splits"] == ["train", "val"] and rebuilt["step"] == 10
    assert Path(rebuilt["plugin_file"]).is_relative_to(target)  # the installed copy, not the sources

    config = json.loads((run / "config.json").read_text())
    assert config["plugins"]["interp.tasks"]["demo-max"]["package"] == "interp-plugin-demo"
    assert config["plugins"]["interp.tasks"]["demo-max"]["version"] == "0.1.0"
    norms = json.loads((out / "norms" / "result.json").read_text())
    assert norms["analysis"] == "demo-norms" and "blocks.0.attn.W_Q" in norms["fields"]["tensor"]
    series = (out / "evolution" / "demo-norms.csv").read_text().splitlines()
    header = series[0].split(",")
    steps = sorted({int(row.split(",")[header.index("step")]) for row in series[1:]})
    assert steps[0] == 0 and {10, 20} <= set(steps) and "val/acc" in header  # joined with the metrics
    assert (out / "evolution" / "rank.csv").is_file()

    # The same run where the plugin is not installed: one line saying which package to install.
    missing = subprocess.run(
        [sys.executable, "-m", "interp", "fingerprint", "--ckpt", str(run)],
        capture_output=True, text=True, env=_env(PYTHONPATH=str(ROOT)), timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "error: the task 'demo-max' comes from the plugin package interp-plugin-demo 0.1.0, which is not "
        "installed (pip install 'interp-plugin-demo==0.1.0') [see docs/errors.md#pluginerror]"
    ]
