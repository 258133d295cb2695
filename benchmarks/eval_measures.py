"""Time the circuit measures logged at every evaluation (`TrainConfig.eval_measures`) at study scale.

Run: `.venv/bin/python benchmarks/eval_measures.py [--repeat 5] [--threads 1]`.

Study A's scale: mpsp-2l2h on MPSP with vocab 32, the first-element shortcut, 16,384 training
examples (2,048 val and adv), r = 0.9. Prints, for a freshly initialised model, the best of
`--repeat` timings of one evaluation without measures (what every evaluation already costs),
of each measure alone, and of one full-batch training step, with the ratio of the measures'
cost to the evaluation's and to the step's; and the machine's load average, since other work
on a shared machine slows every number alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from interp.dissect.measures import MEASURES  # noqa: E402
from interp.metrics import evaluate, mean_loss  # noqa: E402
from models import build_model, preset_config  # noqa: E402
from tasks import MPSPTask  # noqa: E402


def best(fn, repeat: int) -> float:  # noqa: ANN001 - a no-argument callable
    """The fastest of `repeat` wall-clock timings of `fn()`, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Print the timing table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    task = MPSPTask(vocab=32, shortcut="first", r=0.9, n_train=16384)
    splits = task.splits(0)
    model = build_model(preset_config("mpsp-2l2h", task), seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = mean_loss(model.fast_readout(splits["train"].tokens), splits["train"].labels, "cross_entropy")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    evaluation = best(lambda: evaluate(model.readout, splits, "cross_entropy"), args.repeat)
    one_step = best(step, args.repeat)
    print(f"load average before: {os.getloadavg()}, torch threads {args.threads}")
    print(f"evaluation without measures: {evaluation * 1e3:8.1f} ms")
    print(f"one training step (full batch): {one_step * 1e3:8.1f} ms")
    total = 0.0
    for name, measure in MEASURES.items():
        seconds = best(lambda m=measure: m(model, splits, "cross_entropy"), args.repeat)
        total += seconds
        print(f"{name:>15}: {seconds * 1e3:8.1f} ms = {seconds / evaluation:5.2f} x evaluation")
    print(
        f"{'all three':>15}: {total * 1e3:8.1f} ms = {total / evaluation:5.2f} x evaluation "
        f"= {total / one_step:5.2f} x training step"
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
