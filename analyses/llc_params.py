"""The parameters of `llc` and `llc-calibrate`, in a module that imports no torch.

The CLI builds these from the raw arguments before it loads a model
(`interp.cli.preflight.check_params_args`), so a step size <= 0, chains < 1 or an unknown
`restrict` name fails in a fraction of a second with one line and exit code 2. The checks are
the dataclasses' own (`__post_init__`), so a notebook's ``evolve(run, "llc", chains=0)`` fails
the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from interp.config import check_bool, check_choice, check_int, check_real, param
from interp.dissect.weight_parts import parse_restrict
from interp.errors import ConfigError

SAMPLERS = ("sgld", "rmsprop")  # interp.dissect.langevin.SAMPLERS, without importing torch


@dataclass(frozen=True)
class Params:
    """Parameters of `llc`."""

    split: str = param(
        "train", "Split whose examples define the loss L_n (the reference loss is over all of it)."
    )
    step_size: float = param(1e-4, "SGLD step size eps (> 0); calibrate it with `interp llc-calibrate`.")
    n_beta: float = param(
        0.0, "n * beta, the inverse temperature times n; 0: n / log n over the split (WBIC)."
    )
    localization: float = param(100.0, "gamma, the pull towards the checkpoint's weights (>= 0).")
    chains: int = param(4, "Independent chains (>= 1); R-hat needs 2 or more.")
    draws: int = param(200, "Recorded steps per chain (>= 1).")
    burn_in: int = param(100, "Steps per chain before recording (>= 0).")
    batch_size: int = param(512, "Examples per step and chain; 0: the whole split (full batch).")
    seed: int = param(0, "Seed of the noise and the minibatches (same seed: bit-identical estimate).")
    sampler: str = param("sgld", "sgld, or rmsprop (RMSProp-preconditioned SGLD).")
    restrict: str = param(
        "", "Sample only these parts, comma-separated: L0H1, blocks.0.mlp, embed, ... (empty: every weight)."
    )
    vectorize: bool = param(
        False,
        "Step all chains in one torch.func.vmap call; off: a loop over the chains, each one autograd pass on the "
        "model's fast training forward (faster on one or two threads: benchmarks/README.md).",
    )
    stack: bool = param(
        False,
        "Step the chains in groups of ~1,024 examples a pass of the model's stacked forward (weights "
        "[chains, ...]; our 1- and 2-layer transformers, others loop): each chain keeps its own minibatches and "
        "noise, only the gradients' rounding differs; faster on CPU (benchmarks/README.md). Off: the loop or vmap.",
    )
    calibration: str = param(
        "", "An `llc-calibrate` result folder: its recommended step size and n_beta replace the two above."
    )

    def __post_init__(self) -> None:
        check_real("llc", "step_size", self.step_size, 0, math.inf, low_open=True, high_open=True)
        check_real("llc", "n_beta", self.n_beta, 0, math.inf, high_open=True)
        check_real("llc", "localization", self.localization, 0, math.inf, high_open=True)
        check_int("llc", "chains", self.chains, 1)
        check_int("llc", "draws", self.draws, 1)
        check_int("llc", "burn_in", self.burn_in, 0)
        check_int("llc", "batch_size", self.batch_size, 0)
        check_int("llc", "seed", self.seed, 0)
        check_choice("llc", "sampler", self.sampler, SAMPLERS)
        check_bool("llc", "vectorize", self.vectorize)
        check_bool("llc", "stack", self.stack)
        if self.vectorize and self.stack:
            raise ConfigError("llc.vectorize and llc.stack are both set", "set one of them")
        parse_restrict(self.restrict)


@dataclass(frozen=True)
class CalibrateParams(Params):
    """Parameters of `llc-calibrate`: the grid, and the `llc` settings of every cell (shorter
    chains than `llc`'s by default: a grid costs one estimate per cell).
    """

    draws: int = param(60, "Recorded steps per chain in each cell (>= 1).")
    burn_in: int = param(40, "Steps per chain before recording, in each cell (>= 0).")

    step_sizes: str = param("1e-5,1e-4,1e-3", "Step sizes to try, comma-separated (each > 0).")
    n_betas: str = param(
        "0.3x,1x", "n_beta values to try, comma-separated; a value ending in x is a multiple of n / log n."
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration:
            raise ConfigError(
                "llc-calibrate.calibration is set", "a calibration sweeps its own grid: leave it empty"
            )
        step_size_values(self.step_sizes)
        n_beta_values(self.n_betas, 1.0)


def step_size_values(text: str) -> list[float]:
    """The `step_sizes` text as values, each checked (> 0)."""
    values = _numbers("step_sizes", text)
    for value in values:
        check_real("llc-calibrate", "step_sizes", value, 0, math.inf, low_open=True, high_open=True)
    return values


def n_beta_values(text: str, default: float) -> list[float]:
    """The `n_betas` text as values: ``"1x"`` is `default` (n / log n), ``"300"`` is 300."""
    values = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        factor = item.endswith("x")
        (value,) = _numbers("n_betas", item[:-1] if factor else item)
        check_real("llc-calibrate", "n_betas", value, 0, math.inf, low_open=True, high_open=True)
        values.append(value * default if factor else value)
    if not values:
        raise ConfigError(f"llc-calibrate.n_betas = {text!r} names no value", "e.g. 0.3x,1x or 100,1000")
    return values


def _numbers(name: str, text: str) -> list[float]:
    """Comma-separated numbers, or a one-line error naming the bad item."""
    values = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        try:
            values.append(float(item))
        except ValueError:
            raise ConfigError(
                f"llc-calibrate.{name}: {item!r} is not a number", "e.g. 1e-5,1e-4,1e-3"
            ) from None
    if not values:
        raise ConfigError(f"llc-calibrate.{name} = {text!r} names no value", "e.g. 1e-5,1e-4,1e-3")
    return values
