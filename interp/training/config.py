"""How to train and how to fine-tune: the configs of `interp.training`'s engines (no torch).

They import nothing heavy, so the CLI builds and checks them (and generates its options from
their `param` help texts) before torch is imported: a bad ``--lr`` fails in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from interp.config import check_choice, check_int, check_real, param

LOSSES = ("cross_entropy", "mse")
"""The training losses `interp.metrics.per_example_loss` implements."""

EVAL_MEASURES = ("attn_pos0", "ov_parity_rho", "grad_groups")
"""The circuit measures `TrainConfig.eval_measures` may name (`interp.dissect.measures`)."""


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
    eval_measures: tuple[str, ...] = param(
        (),
        "Circuit measures logged at every evaluation (opt-in; interp.dissect.measures): attn_pos0, "
        "ov_parity_rho, grad_groups. Cost at study scale: about one training step per evaluation, "
        "mostly grad_groups (docs/concepts/training.md).",
    )

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
        if self.weight_norm is not None:
            check_real(owner, "weight_norm", self.weight_norm, 0, float("inf"), low_open=True)


@dataclass(frozen=True)
class FinetuneConfig:
    """How to fine-tune until a train-accuracy target (`interp.training.finetune.finetune`)."""

    lr: float = param(1e-3, "AdamW learning rate.")
    betas: tuple[float, float] = param((0.9, 0.98), "AdamW betas (two numbers in [0, 1)).")
    weight_decay: float = param(0.0, "AdamW decoupled weight decay (moot under weight_norm).")
    target_acc: float = param(0.998, "Stop once the train accuracy is strictly above this.")
    max_steps: int = param(20000, "Stop after this many steps even if the target was not reached.")
    eval_every: int = param(10, "Evaluate every split every this many steps.")
    checkpoint_every: int = param(1000, "Checkpoint every this many steps (plus step 0 and the stop).")
    weight_norm: float | None = param(
        None, "Project all trainable tensors onto ||w|| = this before and after every step."
    )
    loss: str = param("cross_entropy", "cross_entropy or mse.")
    data_seed: int = param(0, "Seed of the task's splits.")

    def __post_init__(self) -> None:
        owner = "FinetuneConfig"
        for name in ("max_steps", "eval_every", "checkpoint_every"):
            check_int(owner, name, getattr(self, name), 1)
        check_int(owner, "data_seed", self.data_seed, 0)
        check_real(owner, "lr", self.lr, 0, float("inf"), low_open=True)
        check_real(owner, "weight_decay", self.weight_decay, 0, float("inf"))
        check_real(owner, "target_acc", self.target_acc, 0, 1, high_open=True)
        _check_betas(owner, self.betas)
        check_choice(owner, "loss", self.loss, LOSSES)
        if self.weight_norm is not None:
            check_real(owner, "weight_norm", self.weight_norm, 0, float("inf"), low_open=True)

    def train_config(self) -> TrainConfig:
        """The equivalent `TrainConfig` (full batch; evaluation and checkpoints on a fixed cadence)."""
        return TrainConfig(
            epochs=self.max_steps,
            lr=self.lr,
            betas=self.betas,
            weight_decay=self.weight_decay,
            loss=self.loss,
            weight_norm=self.weight_norm,
            data_seed=self.data_seed,
            eval_every=self.eval_every,
            eval_log_points=0,
            checkpoint_every=self.checkpoint_every,
            checkpoint_log_points=0,
        )


def _check_betas(owner: str, betas: tuple[float, float]) -> None:
    if not isinstance(betas, tuple) or len(betas) != 2:
        check_real(owner, "betas", betas, 0, 1, high_open=True)  # raises with the valid range
    for value in betas:
        check_real(owner, "betas", value, 0, 1, high_open=True)
