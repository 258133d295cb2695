"""Seconds per 1,000 full-batch epochs for N seeds: vectorised vs one seed at a time.

Run: `.venv/bin/python benchmarks/multi_seed.py [--preset mpsp-2l2h] [--seeds 32]
[--device cuda] [--threads 2] [--repeats 5] [--bf16]`.

Times the engine's own epoch functions on study A's training set (16,384 examples, full
batch), so what is measured is what `interp train` runs:

  (a) TransformerLens 3.x `HookedTransformer`, one seed after another (N x one step);
  (b) our engine, one seed after another (`interp.training.TrainLoop.epoch`, `fast_readout`; N x one epoch);
  (c) our engine, all N seeds vectorised into one model (`interp.training.vectorized`, one epoch).

Each is the median of `--repeats` epochs after one warm-up, times 1,000; ratios are against
(a) in the same run. On a GPU (c) is the point: N small models become one large one. On a CPU
separate processes (`interp train --seeds`) usually beat (c), and this script says by how much.
`--bf16` is refused where the CPU has no native bf16 (`interp.training.precision`: about 20x
slower than fp32 there; `INTERP_BF16=1` times it anyway).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib  # noqa: E402

from interp.errors import ConfigError  # noqa: E402
from interp.splits import split_digests  # noqa: E402
from interp.store import open_run  # noqa: E402
from interp.training import TrainConfig, TrainLoop, run_config  # noqa: E402
from interp.training.precision import check_bf16  # noqa: E402
from interp.training.vectorized import StackedSeeds  # noqa: E402
from models import build_model, preset_config  # noqa: E402
from tasks import MPSPTask  # noqa: E402


def median_seconds(step: Callable[[], None], device: str, repeats: int) -> float:
    """Median wall time of `step` after one warm-up, synchronising the device around each."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    step()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    """Parse the options, time the three variants, print seconds per 1,000 epochs and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mpsp-2l2h")
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for (b) and (c)")
    args = parser.parse_args()
    try:  # emulated bf16 would time something no one should run (interp.training.precision)
        check_bf16(args.bf16, args.device, where="--bf16", instead="drop --bf16 to time fp32")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # TransformerLens 3.x's deprecation warning for HookedTransformer
    from transformer_lens import HookedTransformer

    from models.convert import to_transformer_lens_config

    task = MPSPTask()  # study A's default: 16,384 training examples
    config = TrainConfig(epochs=10**6, bf16=args.bf16)  # schedules only; nothing is trained to the end
    cfg = preset_config(args.preset, task)
    splits = task.splits(config.data_seed)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        loops = []
        for seed in range(args.seeds):
            seeded = TrainConfig(**{**config.__dict__, "seed": seed})
            model = build_model(cfg, seed=seed)
            run = stack.enter_context(
                open_run(Path(tmp) / f"seed_{seed}", run_config(model, task, seeded), split_digests(splits))
            )
            loops.append(TrainLoop(run, model.to(args.device), splits, seeded, args.device))
        stacked = StackedSeeds(loops)
        train = loops[0].splits["train"]
        tl = HookedTransformer(to_transformer_lens_config(cfg)).to(args.device)
        opt = torch.optim.AdamW(tl.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.1)

        def tl_step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(tl(train.tokens)[:, -1], train.labels).backward()
            opt.step()

        n = args.seeds
        print(
            f"torch {torch.__version__}, device {args.device}, {args.threads} threads, preset {args.preset}, "
            f"{n} seeds, batch {len(train)}{', bf16' if args.bf16 else ''}, median of {args.repeats} epochs"
        )
        results = {
            "(a) HookedTransformer, seeds one by one": n * median_seconds(tl_step, args.device, args.repeats),
            "(b) interp engine, seeds one by one": n
            * median_seconds(loops[0].epoch, args.device, args.repeats),
            "(c) interp engine, seeds vectorised": median_seconds(stacked.epoch, args.device, args.repeats),
        }
    base = results["(a) HookedTransformer, seeds one by one"]
    print(f"\n| variant ({n} seeds) | s per 1,000 epochs | vs (a) |\n|---|---|---|")
    for label, seconds in results.items():
        print(f"| {label} | {1000 * seconds:.1f} | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
