"""Time an LLC estimate of a checkpoint against 30 full-batch training epochs of the same model.

Run: `PYTHONPATH=$PWD .venv/bin/python benchmarks/llc.py [--run results/study-a/series/mpsp-2l2h-r0.9]
[--calibration FOLDER] [--threads 2] [--batch 256] [--step-size 1e-4] [--batches 64,256,1024] [--epochs 30]
[--evolve 100]`.

In one process, on the same threads:

1. **the sampler step**: seconds per sampler step of 4 chains x `--batch` examples (median of 5
   steps after 1 warm-up) on the fast training forward (`fast_readout`, what `llc` samples on
   for our models), all chains in one `torch.func.vmap` call against a loop over the chains
   (one plain autograd pass each) and against the stacked forward (`stack`: chains in groups
   of ~1,024 examples a pass, weights ``[chains, ...]``), and the loop on the hooked forward (`readout`, what it
   sampled on before, and what a TransformerLens model still samples on), with the cost per
   example-gradient against a training epoch's;
2. **the target**: one checkpoint's estimate at `llc`'s **default settings** but for the batch
   (`--batch`, 256 by default: the readings' setting, docs/llc_readings.md reading (b); or the
   calibration's step size and n_beta if given; 4 chains, 200 draws, 100 burn-in), chains
   looped or vmapped as 1. measured faster, and the same estimate with the chains stacked
   (`stack`), each against 30 full-batch training epochs of the same model (the training
   loop's forward, `fast_readout`, cross-entropy, AdamW, on the run's 16,384 examples), and
   their ratio (target: <= 1);
3. **precision against time**: the stacked estimate at each batch size of `--batches` (none by
   default: each costs as much as 2.): its standard error over chains and its seconds
   (minibatch noise at ``n_beta = n / log n`` grows as the batch shrinks);
4. **an evolve over `--evolve` checkpoints** (100; 0: skip): `evolve(run, "llc")` at the default
   settings with its progress bar, over a tiny `mpsp-1l1h` series trained here in a temporary
   folder with a checkpoint every epoch (the committed series have 41 checkpoints), cold
   cache: its seconds per checkpoint.

It prints the CPU (model name, AVX-512 or not), the torch threads and the 1-minute load before
and after: on a loaded machine every number is indicative only (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch


def cpu_line() -> str:
    """The CPU's model name and whether it has AVX-512, from /proc/cpuinfo."""
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next(
        (line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?"
    )
    capability = torch.backends.cpu.get_cpu_capability()
    avx = "AVX-512" if "avx512f" in text else "no AVX-512"
    return f"{name} ({avx}, torch CPU capability {capability}), {os.cpu_count()} cores, {platform.machine()}"


def step_times(subject, batch: int, chains: int = 4, repeats: int = 5) -> dict[str, float]:
    """Median seconds per sampler step: fast forward vmapped and looped, the stacked forward
    (chains in groups of `STACK_EXAMPLES` examples a pass), hooked forward looped.
    """
    from analyses.llc import loss_of, stacked_loss_of
    from interp.dissect.learning_coefficient import llc

    split = subject.split("train")
    out = {}
    for label, fast, vectorize, stack in (
        ("vmap", True, True, False),
        ("loop", True, False, False),
        ("stacked", True, False, True),
        ("hooked loop", False, False, False),
    ):
        stacked = stacked_loss_of(subject.model, subject.loss) if stack else None
        times = []
        for seed in range(repeats + 1):
            est = llc(
                subject.model, (split.tokens, split.labels), loss_of(subject.loss, fast=fast), step_size=1e-7,
                chains=chains, draws=1, burn_in=0, batch_size=batch, seed=seed, vectorize=vectorize,
                stacked=stacked,
            )  # fmt: skip
            times.append(est.seconds)
        out[label] = statistics.median(times[1:])
    return out


class Clock:
    """Wall seconds and this process's CPU seconds since it started: on a loaded machine the CPU
    seconds are the steadier measure of work (the wall's include the time the process waited).
    """

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict[str, float]:
        """Wall and CPU seconds since the clock started."""
        return {"wall": time.perf_counter() - self.wall, "cpu": time.process_time() - self.cpu}


def epochs_seconds(subject, epochs: int) -> dict[str, float]:
    """Wall and CPU seconds of `epochs` full-batch training epochs on a copy (fast_readout,
    cross-entropy, AdamW).
    """
    import copy

    import torch.nn.functional as F

    model = copy.deepcopy(subject.model)
    split = subject.split("train")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.1)
    forward = getattr(model, "fast_readout", model.readout)
    clock = Clock()
    for _ in range(epochs):
        loss = F.cross_entropy(forward(split.tokens), split.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return clock.read()


def estimate_row(llc, subject, epochs: dict[str, float], label: str, **fields) -> dict:
    """One estimate of `subject` with `fields` over `llc`'s defaults, timed (wall and CPU) and printed."""
    params = llc.params(**fields)
    clock = Clock()
    result = llc.compute(subject, params)
    took = clock.read()
    ratio = {k: took[k] / epochs[k] for k in took}
    mode = "stacked" if params.stack else "vmap" if params.vectorize else "loop"
    print(f"estimate, {label} (batch {params.batch_size}, {params.chains} chains x {params.burn_in} burn-in + "
          f"{params.draws} draws, {mode}): {result.estimate:.4g} ± "
          f"{result.se:.2g} (se), flags {result.flags or 'none'}, {took['wall']:.1f} s wall = {ratio['wall']:.2f} x "
          f"the epochs, {took['cpu']:.1f} CPU s = {ratio['cpu']:.2f} x (step size {result.step_size:g}, "
          f"n_beta {result.n_beta:.4g})")  # fmt: skip
    return {"label": label, "mode": mode, "batch": params.batch_size, "seconds": took, "estimate": result.estimate,
            "se": result.se, "flags": result.flags, "step_size": result.step_size, "n_beta": result.n_beta,
            "ratio_to_epochs": ratio}  # fmt: skip


def evolve_seconds(checkpoints: int) -> dict:
    """`evolve(run, "llc")` at the default settings over a tiny series of `checkpoints` checkpoints."""
    import tempfile

    from analyses import evolve
    from interp.cli import main as cli

    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "run"
        args = ["train", "--preset", "mpsp-1l1h", "--vocab", "12", "--n", "4", "--n-train", "128",
                "--n-val", "32", "--n-adv", "32", "--epochs", str(checkpoints - 1), "--checkpoint-every", "1",
                "--seed", "0", "--out", str(run)]  # fmt: skip
        try:
            cli(args)
        except SystemExit as done:
            if done.code:
                raise
        start = time.perf_counter()
        series = evolve(run, "llc", progress=True)
        seconds = time.perf_counter() - start
    print(f"evolve llc over {len(series.steps)} checkpoints (tiny mpsp-1l1h, 128 examples, defaults): "
          f"{seconds:.1f} s, {seconds / len(series.steps):.2f} s a checkpoint")  # fmt: skip
    return {"checkpoints": len(series.steps), "seconds": seconds}


def main() -> None:
    """Measure and print (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="results/study-a/series/mpsp-2l2h-r0.9")
    parser.add_argument("--calibration", default="")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=256, help="the estimate's batch (the readings': 256)")
    parser.add_argument(
        "--step-size", type=float, default=1e-4, help="the estimates' step size (llc's default)"
    )
    parser.add_argument("--batches", default="", help="extra batch sizes, e.g. 64,256,1024")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--burn-in", type=int, default=100)
    parser.add_argument("--evolve", type=int, default=100, help="checkpoints of the evolve (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from analyses import get_analysis, load_subject

    llc = get_analysis("llc")
    subject = load_subject(args.run)
    print(f"CPU: {cpu_line()}; torch threads {torch.get_num_threads()}; load before {os.getloadavg()[0]:.2f}")
    print(
        f"checkpoint: {subject.source} (step {subject.step}), train split {len(subject.split('train')):,} examples"
    )
    steps = step_times(subject, args.batch)
    epochs = epochs_seconds(subject, args.epochs)
    n = len(subject.split("train"))
    per_example = {k: v / (4 * args.batch) / (epochs["wall"] / (args.epochs * n)) for k, v in steps.items()}
    print(
        f"sampler step, 4 chains x batch {args.batch}: "
        + ", ".join(
            f"{k} {v:.3f} s ({per_example[k]:.2f}x an epoch's cost per example)" for k, v in steps.items()
        )
        + f"; loop/vmap {steps['loop'] / steps['vmap']:.2f}, stacked/loop {steps['stacked'] / steps['loop']:.2f}, "
        f"hooked/fast {steps['hooked loop'] / steps['loop']:.2f}"
    )
    each = epochs["wall"] / args.epochs
    print(f"{args.epochs} full-batch training epochs: {epochs['wall']:.1f} s wall ({each:.3f} s each), "
          f"{epochs['cpu']:.1f} CPU s")  # fmt: skip
    shared = dict(calibration=args.calibration, draws=args.draws, burn_in=args.burn_in, step_size=args.step_size,
                  vectorize=steps["vmap"] <= steps["loop"])  # fmt: skip
    rows = [estimate_row(llc, subject, epochs, "target settings", batch_size=args.batch, **shared)]
    stacked = dict(shared, vectorize=False, stack=True)
    rows.append(
        estimate_row(llc, subject, epochs, "target settings, stacked", batch_size=args.batch, **stacked)
    )
    for batch in [int(b) for b in args.batches.split(",") if b]:
        rows.append(estimate_row(llc, subject, epochs, f"batch {batch}", batch_size=batch, **stacked))
    evolved = evolve_seconds(args.evolve) if args.evolve else None
    print(f"load after {os.getloadavg()[0]:.2f}")
    print(json.dumps({"cpu": cpu_line(), "steps": steps, "per_example": per_example, "epochs_seconds": epochs,
                      "estimates": rows,
                      "evolve": evolved}))  # fmt: skip


if __name__ == "__main__":
    main()
