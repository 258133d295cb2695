"""Time the CLI's bad-input errors: wall time until the one-line error, per case (issue 13: < 1 s).

Run: `.venv/bin/python benchmarks/cli_errors.py [--repeat 3]`.

Each case is `python -m interp ...` in a fresh process (interpreter start-up included, as a
user waits for it), timed from spawn to exit; the table gives the best of `--repeat` runs, the
exit code, whether torch or TransformerLens was imported before the error, and the line
printed. The run folders are made in a temporary folder as training leaves them (config,
manifest), without weights, since no check reads them. `tests/integration/test_preflight.py`
asserts the same cases deterministically (exit 2, one line, no heavy import).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyses.recipes import plan_runs  # noqa: E402
from interp.store.layout import CHECKPOINTS_DIR  # noqa: E402
from interp.store.session import open_run  # noqa: E402

TARGET_S = 1.0
# Runs the CLI, prints whether it imported torch or TransformerLens, and exits with its code.
DRIVER = (
    "import sys\nfrom interp.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
    "print('heavy:', [m for m in ('torch', 'transformer_lens') if m in sys.modules], file=sys.stderr)\n"
    "sys.exit(code)"
)
CASES = [
    "train --preset mpsp-2l2 --out {new}",
    "train --label sum-mod4 --out {new}",
    "train --r 1.5 --out {new}",
    "train --epochs 0 --out {new}",
    "train --resume {missing}",
    "train --resume {damaged}",
    "train --preset mpsp-2l2h --r 0.5 --out {run}",
    "train --resume {run}  [locked]",
    "describe --label sum-mod4",
    "patch --ckpt {missing} --split adv",
    "patch --ckpt {run} --split avd",
    "fingerprint --ckpt {empty}",
    "evolve --run {missing} --analysis fingerprint",
    "evolve --run {run} --analysis patch --param split=avd",
]


def make_runs(root: Path) -> dict[str, Path]:
    """A study-A run folder with one checkpoint manifest, a damaged one, one without checkpoints."""
    config = plan_runs("mpsp-2l2h", {"r": 0.9}, {}, None, root / "run")[0].config()
    run, empty = root / "run", root / "empty"
    for folder in (run, empty):
        with open_run(folder, config):  # creates the folder and its config.json
            pass
    ckpt = run / CHECKPOINTS_DIR / "step_000000"
    ckpt.mkdir(parents=True)
    manifest = {"format_version": 1, "step": 0, "files": {"model.safetensors": "0" * 64}, "meta": {}}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    (run / CHECKPOINTS_DIR / "LATEST").write_text("step_000000\n")
    (root / "damaged").mkdir()
    (root / "damaged" / "config.json").write_text((run / "config.json").read_text()[:40])
    return {
        "run": run,
        "damaged": root / "damaged",
        "empty": empty,
        "missing": root / "no-such-run",
        "new": root / "new",
    }


def time_case(args: list[str], repeat: int) -> tuple[float, int, str, str]:
    """Best wall seconds, exit code, heavy modules and the error line of `interp ARGS`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, env=env)
        best = min(best, time.perf_counter() - start)
    lines = done.stderr.strip().splitlines()
    return best, done.returncode, lines[-1].removeprefix("heavy: "), lines[0] if len(lines) > 1 else ""


def main() -> None:
    """Make the run folders, time every case, print one row each and the verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="Runs per case (the best is shown).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        runs = make_runs(Path(folder))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, transformer_lens"], capture_output=True)
        print(
            f"for scale: importing torch + transformer_lens alone takes {time.perf_counter() - start:.2f} s"
        )
        worst = 0.0
        for case in CASES:
            command = case.removesuffix("  [locked]").format(**runs).split()
            if case.endswith("[locked]"):
                with open_run(runs["run"], json.loads((runs["run"] / "config.json").read_text())):
                    seconds, code, heavy, line = time_case(command, args.repeat)
            else:
                seconds, code, heavy, line = time_case(command, args.repeat)
            worst = max(worst, seconds)
            print(f"{seconds:5.2f} s  exit {code}  heavy {heavy:10s}  interp {case}\n         {line[:150]}")
    verdict = "met" if worst < TARGET_S else "NOT met"
    print(f"slowest {worst:.2f} s; target < {TARGET_S:g} s for every case: {verdict}")


if __name__ == "__main__":
    main()
