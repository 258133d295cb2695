"""Time study C's training step (quadratic MLP, full batch) against this CPU's matmul peak.

Run: `.venv/bin/python benchmarks/quadratic_mlp.py [--threads 1] [--steps 30] [--xi 0.35]`.

Part 1, one step alone: forward on the 4,704 training pairs of `x + y mod 97`, MSE against
one-hot targets, backward, AdamW(lr 1e-2, betas (0.9, 0.98), weight decay 1.0) step. Variants,
all from the same weights:

  (a) ours: `QuadraticMLP.fast_readout` (lookups, square, matmul; hand-written backward), fp32;
  (a') the same under bf16 autocast (bf16 products; fp32 weights, optimizer and lookups);
  (r) the same function through autograd (`(W_L[m] + W_R[n])^2 @ W_U`), fp32;
  (b) the study notebook's form: concatenated one-hots (built once) times `[W_L; W_R]`;
  (c) as (b) but building the one-hots inside every step.

Part 2, the engine: `TrainLoop.epoch` (what `interp train` runs per step) and
`TrainLoop.evaluate` (every split and group with the hooked forward, every `eval_every` = 10
epochs in study C), so "ms per step" includes evaluation as a study run pays it.

A step's matrix work is three 4,704 x 500 x 97 products (forward, and the two of backward):
1.37 GFLOP. Rates are against the matmul peak measured here (best of 8 2048^3 matmuls on the
same threads). Timings are medians of `--steps` rounds in which the variants alternate step by
step, so background load hits them alike. Where the CPU has no native bf16
(`interp.training.precision`) the bf16 peak and rows are skipped with a note (`INTERP_BF16=1`
times them anyway).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyses.recipes import PRESET_TRAINING  # noqa: E402
from benchmarks.train_step import bf16_timed, matmul_peak  # noqa: E402
from interp.splits import split_digests  # noqa: E402
from interp.store.session import open_run  # noqa: E402
from interp.training import TrainConfig  # noqa: E402
from interp.training.loop import TrainLoop, run_config  # noqa: E402
from interp.training.memory import keep_freed_memory  # noqa: E402
from models import build_model, preset_config  # noqa: E402
from tasks import ModAddTask  # noqa: E402

TARGET_MS = 20.0  # issue 13: a study-C step, evaluation included, on one thread


class OneHotQuadraticMLP(nn.Module):
    """The study's model written as matmuls over concatenated one-hots (same weights as ours)."""

    def __init__(self, ours: nn.Module) -> None:
        super().__init__()
        self.d_vocab = ours.W_E_left.shape[0]
        self.W_in = nn.Parameter(torch.cat([ours.W_E_left.detach(), ours.W_E_right.detach()]).clone())
        self.W_out = nn.Parameter(ours.W_U.detach().clone())

    def one_hot(self, tokens: Tensor) -> Tensor:
        """The two operands as concatenated one-hots, [batch, 2 p]."""
        return torch.cat(
            [F.one_hot(tokens[:, 0], self.d_vocab), F.one_hot(tokens[:, 1], self.d_vocab)], dim=1
        ).float()

    def forward(self, x: Tensor) -> Tensor:
        """Logits [batch, p] of the one-hot formulation."""
        return (x @ self.W_in).square() @ self.W_out


def timed_steps(
    steps_by_name: dict[str, Callable[[], object]], rounds: int, warmup: int = 3
) -> dict[str, float]:
    """Median seconds per call of each step, the variants interleaved round by round so that
    they all see the same background load.
    """
    for step in steps_by_name.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps_by_name}
    for _ in range(rounds):
        for name, step in steps_by_name.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def make_step(
    model: nn.Module, forward: Callable[[], Tensor], target: Tensor, bf16: bool = False
) -> Callable[[], None]:
    """One full-batch AdamW step of `model` on `forward`'s output against `target` (MSE), optionally under bf16."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), weight_decay=1.0)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = forward()
        loss = (logits.float() - target).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def step_variants(task: ModAddTask, bf16: bool) -> tuple[dict[str, Callable[[], None]], float]:
    """The part-1 steps (bf16's only if `bf16`), and the max |logit difference| of (b) against (a) at init."""
    train = task.splits(0)["train"]
    tokens, target = train.tokens, F.one_hot(train.labels, task.p).float()

    def ours() -> nn.Module:
        return build_model(preset_config("quadratic-mlp", task), seed=0)

    a, a16, ref = ours(), ours(), ours()
    onehot, onehot_c = OneHotQuadraticMLP(a), OneHotQuadraticMLP(ours())
    x = onehot.one_hot(tokens)
    with torch.no_grad():
        diff = (a.fast_readout(tokens) - onehot(x)).abs().max().item()
    autograd = lambda: (ref.W_E_left[tokens[:, 0]] + ref.W_E_right[tokens[:, 1]]).square() @ ref.W_U  # noqa: E731
    steps = {
        "(a) ours: fast_readout fp32": make_step(a, lambda: a.fast_readout(tokens), target),
        "(a') ours: fast_readout bf16": make_step(a16, lambda: a16.fast_readout(tokens), target, bf16=True),
        "(r) same function through autograd": make_step(ref, autograd, target),
        "(b) one-hot matmul, one-hots built once": make_step(onehot, lambda: onehot(x), target),
        "(c) one-hot matmul, built every step": make_step(
            onehot_c, lambda: onehot_c(onehot_c.one_hot(tokens)), target
        ),
    }
    return {name: step for name, step in steps.items() if bf16 or "bf16" not in name}, diff


def engine_steps(task: ModAddTask, rounds: int, dtypes: list[str]) -> dict[str, tuple[float, float, int]]:
    """Per dtype: median seconds of `TrainLoop.epoch`, of `TrainLoop.evaluate`, and eval_every."""
    out = {}
    splits = task.splits(0)
    for dtype in dtypes:
        config = TrainConfig(**{**PRESET_TRAINING["quadratic-mlp"], "bf16": dtype == "bf16"})
        model = build_model(preset_config("quadratic-mlp", task), seed=0)
        with (
            tempfile.TemporaryDirectory() as folder,
            open_run(Path(folder) / "run", run_config(model, task, config), split_digests(splits)) as run,
        ):
            loop = TrainLoop(run, model, splits, config)
            loop.step = 0
            times = timed_steps({"epoch": loop.epoch, "evaluate": loop.evaluate}, rounds)
        out[dtype] = (times["epoch"], times["evaluate"], config.eval_every)
    return out


def main() -> None:
    """Parse the options, time every implementation, print ms per step, GFLOP/s and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (study C sweeps run one per core)."
    )
    parser.add_argument("--steps", type=int, default=30, help="Timed steps per variant.")
    parser.add_argument("--xi", type=float, default=0.35, help="Label noise of the training labels.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as every timed variant gets it, ours and the references alike

    task = ModAddTask.study_c(xi=args.xi)
    n, width = task.n_train, preset_config("quadratic-mlp", task).d_hidden
    flops = 3 * 2 * n * width * task.p
    print(
        f"quadratic MLP p={task.p}, N={width}, batch {n} (full batch), threads {args.threads}; "
        f"{flops / 1e9:.2f} GFLOP of matmuls per step"
    )
    peaks = {"fp32": matmul_peak(torch.float32)}
    if bf16_timed():
        peaks["bf16"] = matmul_peak(torch.bfloat16)
    print(
        "matmul peak (2048^3): "
        + ", ".join(f"{dtype} {peak / 1e9:.0f} GFLOP/s" for dtype, peak in peaks.items())
    )
    variants, diff = step_variants(task, "bf16" in peaks)
    print(f"max |logits(a) - logits(b)| at init: {diff:.2e}")
    times = timed_steps(variants, args.steps)
    base = times["(a) ours: fast_readout fp32"]
    for name, seconds in times.items():
        dtype = "bf16" if "bf16" in name else "fp32"
        rate = flops / seconds
        print(
            f"{name:42s} {1e3 * seconds:7.2f} ms/step  x{seconds / base:5.2f} of (a)  "
            f"{rate / 1e9:6.1f} GFLOP/s "
            f"({100 * rate / peaks[dtype]:.0f}% of {dtype} peak)"
        )
    print("\nthe engine (TrainLoop), per step with evaluation every eval_every epochs:")
    for dtype, (epoch, evaluate, every) in engine_steps(task, args.steps, list(peaks)).items():
        per_step = epoch + evaluate / every
        print(
            f"  {dtype}: epoch {1e3 * epoch:6.2f} ms + evaluate {1e3 * evaluate:6.2f} ms / {every} = "
            f"{1e3 * per_step:6.2f} ms/step "
            f"({100 * flops / epoch / peaks[dtype]:.0f}% of {dtype} peak in the epoch; "
            f"target <= {TARGET_MS:g} ms: {'met' if 1e3 * per_step <= TARGET_MS else 'NOT met'})"
        )


if __name__ == "__main__":
    main()
