"""Seeds per hour on one core: one run at a time against seeds stacked in the vectorised engine.

Run: `.venv/bin/python benchmarks/seeds_per_hour.py [--models mpsp-1l1h mpsp-2l2h quadratic-mlp]
[--stack 4 8] [--threads 1] [--repeats 3]`.

For each model at its study's shapes (`mpsp-*`: study A's MPSP task at vocab 32 as the
study-A grid uses it, 16,384 training examples, full batch; `quadratic-mlp`: study C's
`x + y mod 97`, 4,704 pairs, full batch), with the study's training settings
(`PRESET_TRAINING`):

  (1) one run at a time: `interp.training.TrainLoop.epoch` (what `interp train` and every
      `interp sweep` worker runs), median of `--repeats` epochs after one warm-up;
  (N) N seeds stacked: `interp.training.vectorized.StackedSeeds.epoch` (one `vmap`ped step
      for all N), median of `--repeats` epochs after one warm-up.

Seeds per hour = N x 3,600 / (epochs per run x seconds per epoch), at the epochs per run of
the study (`--epochs`, default: 1,500 for study A's grid, 20,000 for study C). Evaluation and
checkpoints are left out (both engines pay them on the same schedule). The ratio (N) / (1) is
what decides whether `interp sweep` should stack seeds on CPU: measure it on a quiet machine
(`benchmarks/README.md`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyses.recipes import PRESET_TRAINING  # noqa: E402
from benchmarks.train_step import matmul_peak, median_seconds  # noqa: E402
from interp.splits import split_digests  # noqa: E402
from interp.store import open_run  # noqa: E402
from interp.training import TrainConfig, TrainLoop, run_config  # noqa: E402
from interp.training.memory import keep_freed_memory  # noqa: E402
from interp.training.vectorized import StackedSeeds  # noqa: E402
from models import build_model, preset_config  # noqa: E402
from tasks import ModAddTask, MPSPTask  # noqa: E402

EPOCHS = {"quadratic-mlp": 20000}  # study C; study A's grid (study-a-map) trains 1,500 epochs
DEFAULT_EPOCHS = 1500


def seconds_per_epoch(name: str, stack: list[int], repeats: int) -> dict[int, float]:
    """Seconds per epoch of 1 seed (`TrainLoop`) and of each stack size (`StackedSeeds`)."""
    task = ModAddTask.study_c(xi=0.35) if name == "quadratic-mlp" else MPSPTask(vocab=32)
    cfg = preset_config(name, task)
    splits = task.splits(0)
    out = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack_ctx:

        def loop(seed: int) -> TrainLoop:
            config = TrainConfig(**{**PRESET_TRAINING[name], "seed": seed})
            model = build_model(cfg, seed=seed)
            folder = Path(tmp) / f"{len(list(Path(tmp).iterdir()))}"
            run = stack_ctx.enter_context(
                open_run(folder, run_config(model, task, config), split_digests(splits))
            )
            return TrainLoop(run, model, splits, config)

        out[1] = median_seconds(loop(0).epoch, repeats)
        for n in stack:
            try:
                out[n] = median_seconds(StackedSeeds([loop(s) for s in range(n)]).epoch, repeats)
            except Exception as err:  # noqa: BLE001 - a model the engine cannot vmap: say so
                print(f"  {name}: {n} stacked seeds failed: {type(err).__name__}: {err}")
                out[n] = float("nan")
    return out


def main() -> None:
    """Parse the options, time both engines per model, print seeds per hour and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["mpsp-1l1h", "mpsp-2l2h", "quadratic-mlp"])
    parser.add_argument("--stack", type=int, nargs="+", default=[4, 8], help="stack sizes to time")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    keep_freed_memory()
    import os

    print(
        f"torch {torch.__version__}, {args.threads} thread(s), 1-minute load {os.getloadavg()[0]:.2f}, "
        f"fp32 peak {matmul_peak(torch.float32) / 1e9:.0f} GFLOP/s; median of {args.repeats} epochs"
    )
    print("\n| model | seeds at once | s / epoch | s / seed-epoch | seeds / hour | vs one at a time |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        times = seconds_per_epoch(name, args.stack, args.repeats)
        epochs = EPOCHS.get(name, DEFAULT_EPOCHS)
        for n, sec in times.items():
            rate = n * 3600 / (epochs * sec)
            print(
                f"| {name} ({epochs:,} epochs) | {n} | {sec:.3f} | {sec / n:.3f} | {rate:.1f} | "
                f"{times[1] * n / sec:.2f}x |",
                flush=True,
            )
    print(f"\n1-minute load at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
