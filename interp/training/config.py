"""How to train, from scratch or fine-tuning until a target: the config of `interp.training`'s
engines (no torch).

They import nothing heavy, so the CLI builds and checks them (and generates its options from
their `param` help texts) before torch is imported: a bad ``--lr`` fails in well under a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from interp.config import check_choice, check_int, check_real, param

LOSSES = ("cross_entropy", "mse")
"""The training losses `interp.metrics.per_example_loss` implements."""

EVAL_MEASURES = ("attn_pos0", "ov_parity_rho", "grad_groups")
"""The circuit measures `TrainConfig.eval_measures` may name (`interp.dissect.measures`)."""

ENGINES = ("separate", "vectorized")
"""The training engines a run records (`TrainConfig.engine`): one model per run
(`interp.training.train`), or seeds stacked into one model (`interp.training.train_vectorized`)."""


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model and task have configs of their own)."""

    epochs: int = param(15000, "Passes over the train split (full batch: one epoch is one step).")
    lr: float = param(1e-3, "AdamW learning rate.")
    betas: tuple[float, float] = param((0.9, 0.98), "AdamW betas (two numbers in [0, 1)).")
    weight_decay: float = param(0.1, "AdamW decoupled weight decay.")
    batch_size: int | None = param(None, "Minibatch size [default: full batch].")
    loss: str = param(
        "cross_entropy", "cross_entropy at the readout position, or mse against one-hot targets."
    )
    weight_norm: float | None = param(
        None, "Project all trainable tensors onto ||w|| = this after every step (and once before training)."
    )
    seed: int = param(0, "Seed of the model initialisation and of the minibatch order.")
    data_seed: int = param(0, "Seed of the task's splits.")
    eval_every: int = param(100, "Evaluate every this many epochs (plus eval_log_points log-spaced ones).")
    eval_log_points: int = param(40, "Log-spaced evaluation epochs added (dense early).")
    checkpoint_every: int | None = param(
        None, "Checkpoint every this many epochs [default: log-spaced only]."
    )
    checkpoint_log_points: int = param(20, "Log-spaced checkpoint epochs (dense early).")
    bf16: bool = param(
        False, "bfloat16 autocast for the training forward (weights, optimizer and evaluation stay fp32)."
    )
    target_acc: float | None = param(
        None,
        "Stop before the first step whose full-batch train accuracy is strictly above this "
        "[default: train all epochs].",
        added=True,
    )

    eval_measures: tuple[str, ...] = param(
        (),
        "Circuit measures logged at every evaluation (opt-in; interp.dissect.measures): attn_pos0, "
        "ov_parity_rho, grad_groups. Cost at study scale: about one training step per evaluation, "
        "mostly grad_groups (docs/concepts/training.md).",
        added=True,
    )
    engine: str = param(
        "separate",
        "The engine that trains the run: separate (one model) or vectorized (seeds stacked into one "
        "model: interp train --vectorize). Stacked seeds equal separate runs only up to rounding, "
        "so a run resumes only with the engine it records.",
        added=True,
        cli=False,
    )

    @staticmethod
    def migrate(data: Mapping[str, Any]) -> Mapping[str, Any]:
        """The current form of a train config read from a file (`interp.config.from_dict`).

        Fine-tuning configs were a class of their own before they became `TrainConfig`s with a
        `target_acc`: a dict with ``max_steps`` and no ``epochs`` (as run folders and records
        of fine-tuning runs written then hold) is that form, converted exactly.
        """
        if "max_steps" in data and "epochs" not in data:
            return _from_finetune_form(data)
        return data

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        if isinstance(self.eval_measures, str) or not isinstance(self.eval_measures, (tuple, list)):
            check_choice(owner, "eval_measures", self.eval_measures, EVAL_MEASURES)  # raises
        for name in self.eval_measures:
            check_choice(owner, "eval_measures", name, EVAL_MEASURES)
        for name in ("epochs", "eval_every"):
            check_int(owner, name, getattr(self, name), 1)
        for name in ("batch_size", "checkpoint_every"):
            if getattr(self, name) is not None:
                check_int(owner, name, getattr(self, name), 1)
        for name in ("eval_log_points", "checkpoint_log_points", "seed", "data_seed"):
            check_int(owner, name, getattr(self, name), 0)
        check_real(owner, "lr", self.lr, 0, float("inf"), low_open=True)
        check_real(owner, "weight_decay", self.weight_decay, 0, float("inf"))
        _check_betas(owner, self.betas)
        check_choice(owner, "loss", self.loss, LOSSES)
        check_choice(owner, "engine", self.engine, ENGINES)
        if self.weight_norm is not None:
            check_real(owner, "weight_norm", self.weight_norm, 0, float("inf"), low_open=True)
        if self.target_acc is not None:
            check_real(owner, "target_acc", self.target_acc, 0, 1, high_open=True)


FINETUNE_DEFAULTS: dict[str, Any] = {
    "epochs": 20000,
    "weight_decay": 0.0,
    "target_acc": 0.998,
    "eval_every": 10,
    "eval_log_points": 0,
    "checkpoint_every": 1000,
    "checkpoint_log_points": 0,
}
"""Fine-tuning until a target (`interp.training.finetuning.finetune`, e.g. noise injection): the
`TrainConfig` fields whose defaults differ from training from scratch (`finetune_config`)."""


def finetune_config(**fields: Any) -> TrainConfig:
    """A `TrainConfig` for fine-tuning until a target: `FINETUNE_DEFAULTS`, then `fields`.

    Raises:
        ConfigError: On an invalid value (as `TrainConfig` checks it).
        TypeError: On an unknown field.
    """
    return TrainConfig(**{**FINETUNE_DEFAULTS, **fields})


TRAIN_ENGINE: dict[str, Any] = {
    "section": "train",
    # A config written before runs recorded their engine was a separate run (every sweep's run
    # was); a vectorised group started before then records nothing that tells it apart.
    "default": "separate",
    "hints": {
        "vectorized": "resume it as it was started, with --seeds and --vectorize (interp.training.train_vectorized)",
        "separate": "resume it without --vectorize (interp.training.train)",
    },
    "verb": "trained",
}
"""How `interp.store.run_folder.check_engine` reads a training run's engine from its folder:
``check_engine(run_dir, engine, **TRAIN_ENGINE)``."""


def _from_finetune_form(data: Mapping[str, Any]) -> dict[str, Any]:
    """The `TrainConfig` dict of a fine-tuning config as written before it was one (its
    ``max_steps`` is ``epochs``; evaluation and checkpoints were on a fixed cadence).
    """
    old = {
        "lr": 1e-3,
        "betas": [0.9, 0.98],
        "weight_decay": 0.0,
        "target_acc": 0.998,
        "max_steps": 20000,
        "eval_every": 10,
        "checkpoint_every": 1000,
        "weight_norm": None,
        "loss": "cross_entropy",
        "data_seed": 0,
        **data,
    }
    return {
        **{k: v for k, v in old.items() if k != "max_steps"},
        "epochs": old["max_steps"],
        "eval_log_points": 0,
        "checkpoint_log_points": 0,
    }


def _check_betas(owner: str, betas: tuple[float, float]) -> None:
    if not isinstance(betas, tuple) or len(betas) != 2:
        check_real(owner, "betas", betas, 0, 1, high_open=True)  # raises with the valid range
    for value in betas:
        check_real(owner, "betas", value, 0, 1, high_open=True)
