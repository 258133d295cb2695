"""Time one full-batch training step of study C's quadratic MLP: ours vs a one-hot matmul model.

Run: `.venv/bin/python benchmarks/quadratic_mlp.py [--threads 1] [--steps 30] [--xi 0.35]`.

A step is: forward on the 4,704 training pairs of `x + y mod 97`, MSE against one-hot targets,
backward, AdamW(lr 1e-2, betas (0.9, 0.98), weight decay 1.0) step. Variants, all starting
from the same weights:

  (a) ours: `QuadraticMLP.fast_readout` (two embedding lookups, square, matmul);
  (b) the straightforward implementation of the study's notebook: the inputs as concatenated
      one-hots `[onehot(m), onehot(n)]` (built once, outside the step) times a stacked
      `[W_E_left; W_E_right]` matrix, square, matmul;
  (c) as (b) but building the one-hots inside every step (as a per-step data pipeline would).

Prints the max |logit difference| of (b) against (a) (fp32, must be ~1e-6), the median step
time of each variant after warm-up, and the ratios (b)/(a), (c)/(a). Timings are medians of
`--steps` rounds in which the variants alternate step by step, so background load hits them
alike; read ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models import build_model, preset_config  # noqa: E402
from tasks import ModAddTask  # noqa: E402


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
    steps_by_name: dict[str, Callable[[], None]], rounds: int, warmup: int = 3
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


def make_step(model: nn.Module, forward: Callable[[], Tensor], target: Tensor) -> Callable[[], None]:
    """One full-batch AdamW step of `model` on `forward`'s output against `target` (MSE)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.98), weight_decay=1.0)

    def step() -> None:
        loss = (forward() - target).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    """Parse the options, time both implementations, print ms per step and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (study C sweeps run one per core)."
    )
    parser.add_argument("--steps", type=int, default=30, help="Timed steps per variant.")
    parser.add_argument("--xi", type=float, default=0.35, help="Label noise of the training labels.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    task = ModAddTask.study_c(xi=args.xi)
    train = task.splits(0)["train"]
    tokens, target = train.tokens, F.one_hot(train.labels, task.p).float()
    ours = build_model(preset_config("quadratic-mlp", task), seed=0)
    onehot = OneHotQuadraticMLP(ours)
    x = onehot.one_hot(tokens)
    with torch.no_grad():
        diff = (ours.fast_readout(tokens) - onehot(x)).abs().max().item()

    variants = {
        "(a) ours: fast_readout (embedding lookups)": make_step(
            ours, lambda: ours.fast_readout(tokens), target
        ),
        "(b) one-hot matmul, one-hots built once": make_step(onehot, lambda: onehot(x), target),
    }
    onehot_c = OneHotQuadraticMLP(build_model(preset_config("quadratic-mlp", task), seed=0))
    variants["(c) one-hot matmul, one-hots built every step"] = make_step(
        onehot_c, lambda: onehot_c(onehot_c.one_hot(tokens)), target
    )

    print(
        f"quadratic MLP p={task.p}, N={ours.cfg.d_hidden}, batch {len(tokens)} (full batch), threads {args.threads}"
    )
    print(f"max |logits(a) - logits(b)| at init: {diff:.2e}")
    times = timed_steps(variants, args.steps)
    base = times["(a) ours: fast_readout (embedding lookups)"]
    for name, seconds in times.items():
        print(f"{name:48s} {1000 * seconds:8.2f} ms/step   x{seconds / base:5.2f} of (a)")


if __name__ == "__main__":
    main()
