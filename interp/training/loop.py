"""The training engine: one loop for every hooked model and task, exactly resumable.

`train(run_dir, model, task, config)` trains full batch by default (minibatches optional)
with AdamW, cross-entropy at the readout position or MSE against one-hot targets (study C),
and optionally projects all trainable tensors back onto the sphere `||w|| = R` after every
step (study B's "goldilocks" runs). It evaluates every split and group on a schedule
(`interp.training.schedule`), appends the records to `metrics.jsonl`, checkpoints on a schedule of its
own, and writes `DONE` with the run's milestones at the end.

Never losing work:

* everything that determines the future (weights, optimizer state, minibatch RNG, step) is in
  each checkpoint, and metrics past the resumed checkpoint are dropped and recomputed, so
  resuming after a `kill -9` gives bit-identical weights and metrics (same machine, CPU);
* SIGINT / SIGTERM are turned into a checkpoint at the next step boundary, then
  `TrainingInterrupted` (the CLI exits 130 / 143);
* a finished run (`DONE`) is not retrained, and a lock keeps two processes out of one folder.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from interp.store.checkpoint import checkpoint_name, list_checkpoints, load_checkpoint, load_state_into, save_checkpoint
from interp.config import to_dict
from interp.splits import Split, Task, split_digests
from interp.errors import CheckpointError, ConfigError, TrainingInterrupted
from interp.metrics import LOSSES, evaluate, milestones, per_example_loss
from interp.store.run_folder import CHECKPOINTS_DIR, append_metrics, create_run, is_done, mark_done, read_done, read_metrics, run_lock, truncate_metrics
from interp.training.schedule import schedule


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model and task have configs of their own).

    Attributes:
        epochs: Passes over the train split; with full batch, one epoch is one step.
        lr: AdamW learning rate.
        betas: AdamW betas.
        weight_decay: AdamW (decoupled) weight decay.
        batch_size: Minibatch size, or None for full batch.
        loss: ``"cross_entropy"`` at the readout position, or ``"mse"`` against one-hot targets.
        weight_norm: If set, project all trainable tensors onto `||w|| = weight_norm` after
            every step (and once before training).
        seed: Seed of the model initialisation (the caller builds the model with it) and of
            the minibatch order.
        data_seed: Seed of the task's splits.
        eval_every: Evaluate every this many epochs (plus `eval_log_points` log-spaced ones).
        eval_log_points: Number of log-spaced evaluation epochs added (dense early).
        checkpoint_every: Checkpoint every this many epochs, or None for log-spaced only.
        checkpoint_log_points: Number of log-spaced checkpoint epochs (dense early).
        bf16: Run the training forward under bfloat16 autocast (evaluation stays fp32).
    """

    epochs: int = 15000
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.1
    batch_size: int | None = None
    loss: str = "cross_entropy"
    weight_norm: float | None = None
    seed: int = 0
    data_seed: int = 0
    eval_every: int = 100
    eval_log_points: int = 40
    checkpoint_every: int | None = None
    checkpoint_log_points: int = 20
    bf16: bool = False

    def __post_init__(self) -> None:
        positive = {"epochs": self.epochs, "eval_every": self.eval_every}
        positive |= {k: v for k, v in (("batch_size", self.batch_size), ("checkpoint_every", self.checkpoint_every)) if v is not None}
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not self.lr > 0:
            raise ConfigError(f"lr={self.lr!r} must be > 0")
        if self.weight_decay < 0:
            raise ConfigError(f"weight_decay={self.weight_decay!r} must be >= 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"betas={self.betas!r} must be two numbers in [0, 1)")
        if self.loss not in LOSSES:
            raise ConfigError(f"loss={self.loss!r} is not supported", f"valid: {', '.join(LOSSES)}")
        if self.weight_norm is not None and not self.weight_norm > 0:
            raise ConfigError(f"weight_norm={self.weight_norm!r} must be > 0 (or None for no constraint)")


def run_config(model: nn.Module, task: Task, config: TrainConfig) -> dict[str, Any]:
    """The `config.json` content of a run: model, task and training configs."""
    return {"model": {"kind": model.cfg.kind, **to_dict(model.cfg)}, "task": task.to_dict(), "train": to_dict(config)}


def train(
    run_dir: str | Path, model: nn.Module, task: Task, config: TrainConfig, *,
    device: str = "cpu", progress: bool = True,
) -> dict[str, Any]:
    """Train `model` on `task` into `run_dir`, resuming from its latest checkpoint if any.

    Args:
        run_dir: The run folder (created if needed). If it holds a different config, this
            raises rather than mixing two runs.
        model: A hooked model with a `.cfg` (kind + fields) built with `config.seed`; it is
            trained in place. Its `fast_readout(tokens)` is used for training if it has one.
        task: The task (its splits are rebuilt from `config.data_seed`).
        config: The training config.
        device: Where to train (``"cpu"``, ``"cuda"``, ...). Checkpoints are stored on the CPU.
        progress: Show a progress bar with live accuracies.

    Returns:
        The run summary also written to `DONE` (final metrics and milestones).

    Raises:
        ConfigError: If `run_dir` holds a run with another config.
        CheckpointError: If the run's checkpoints are damaged or its data changed.
        TrainingInterrupted: On SIGINT / SIGTERM, after saving a checkpoint.
    """
    run_dir = create_run(run_dir, run_config(model, task, config))
    with run_lock(run_dir):
        if is_done(run_dir):
            return read_done(run_dir)
        loop = _Loop(run_dir, model.to(device), task, config, device)
        with _stop_on_signals() as stop:
            loop.run(stop, progress)
        summary = loop.summary()
        mark_done(run_dir, summary)
        return summary


class _Loop:
    """The state of one training session (kept small: everything durable is in checkpoints)."""

    def __init__(self, run_dir: Path, model: nn.Module, task: Task, config: TrainConfig, device: str,
                 start: int | None = None) -> None:
        self.run_dir, self.model, self.task, self.config, self.device = run_dir, model, task, config, device
        cpu_splits = task.splits(config.data_seed)
        self.digests = split_digests(cpu_splits)
        self.splits = {name: _to(split, device) for name, split in cpu_splits.items()}
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
        )
        self.generator = torch.Generator().manual_seed(config.seed)  # minibatch order only
        self.readout = getattr(model, "fast_readout", None) or model.readout
        self.eval_steps = set(schedule(config.epochs, config.eval_every, config.eval_log_points, include_zero=True))
        self.ckpt_steps = set(
            schedule(config.epochs, config.checkpoint_every, config.checkpoint_log_points, include_zero=True)
        )
        self.step = self._resume(start)

    def _resume(self, start: int | None) -> int:
        """Load the checkpoint of step `start` (None: the latest; -1: none, start afresh)."""
        if start == -1 or not list_checkpoints(self.run_dir):
            truncate_metrics(self.run_dir, -1)  # records of a run killed before its first checkpoint
            if self.config.weight_norm is not None:
                _project(self.model, self.config.weight_norm)
            return -1
        ckpt = load_checkpoint(self.run_dir if start is None else self.run_dir / CHECKPOINTS_DIR / checkpoint_name(start))
        if ckpt.meta.get("fingerprints") != self.digests:
            raise CheckpointError(
                f"the data of {self.run_dir} changed since checkpoint {ckpt.path.name} was written",
                "the task code or data seed differs; train into a new --out folder",
            )
        load_state_into(self.model, {k: v.to(self.device) for k, v in ckpt.state_dict.items()}, where=str(ckpt.path))
        self.optimizer.load_state_dict(ckpt.train_state["optimizer"])
        self.generator.set_state(ckpt.train_state["generator"])
        truncate_metrics(self.run_dir, ckpt.step)
        return ckpt.step

    def run(self, stop: _StopFlag, progress: bool) -> None:
        """Train until the last epoch, evaluating and checkpointing on schedule."""
        bar = tqdm(total=self.config.epochs, initial=max(self.step, 0), disable=not progress, unit="epoch", dynamic_ncols=True)
        with bar:
            if self.step < 0:  # a fresh run: record and save the initial state as epoch 0
                self.step = 0
                _show(bar, [self._after_step()])
            while self.step < self.config.epochs:
                if stop.signum is not None:
                    self._save()
                    raise TrainingInterrupted(stop.signum, self.step, self.run_dir)
                self._epoch()
                self.step += 1
                bar.update(1)
                _show(bar, [self._after_step()])

    def _epoch(self) -> None:
        train = self.splits["train"]
        n, size = len(train), self.config.batch_size or len(train)
        order = torch.randperm(n, generator=self.generator).to(self.device) if size < n else None
        for start in range(0, n, size):
            index = order[start : start + size] if order is not None else slice(None)
            with torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.config.bf16):
                logits = self.readout(train.tokens[index])
            loss = per_example_loss(logits.float(), train.labels[index], self.config.loss).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            if self.config.weight_norm is not None:
                _project(self.model, self.config.weight_norm)

    def _after_step(self) -> dict[str, Any] | None:
        """Evaluate and checkpoint if the schedule says so; return the metrics record if any."""
        record = None
        if self.step in self.eval_steps:
            record = {"step": self.step, **evaluate(self.model.readout, self.splits, self.config.loss)}
            append_metrics(self.run_dir, record)
        if self.step in self.ckpt_steps:
            self._save()
        return record

    def _save(self) -> None:
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        train_state = {"optimizer": _cpu(self.optimizer.state_dict()), "generator": self.generator.get_state()}
        save_checkpoint(self.run_dir, self.step, state, train_state, meta={"fingerprints": self.digests})

    def summary(self) -> dict[str, Any]:
        records = read_metrics(self.run_dir)
        targets = getattr(self.task, "milestones", {})
        return {"epochs": self.step, "final": records[-1], "milestones": milestones(records, targets)}


def _show(bar: tqdm, records: list[dict[str, Any] | None]) -> None:
    """Show the split accuracies of the records (their mean over several seeds) on the bar."""
    records = [r for r in records if r is not None]
    if records:
        keys = [k for k in records[0] if k.count("/") == 1 and k.endswith("/acc")]
        bar.set_postfix_str(" ".join(f"{k[:-4]} {sum(r[k] for r in records) / len(records):.3f}" for k in keys))


@torch.no_grad()
def _project(model: nn.Module, radius: float) -> None:
    """Rescale all trainable tensors together so their joint L2 norm is `radius`."""
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in params]))
    for p in params:
        p.mul_(radius / norm)


def _to(split: Split, device: str) -> Split:
    if device == "cpu":
        return split
    return Split(split.name, split.tokens.to(device), split.labels.to(device),
                 {k: v.to(device) for k, v in split.groups.items()}, {k: v.to(device) for k, v in split.extras.items()})


def _cpu(obj: Any) -> Any:
    """Move every tensor of a nested optimizer state dict to the CPU (checkpoints are CPU)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, Mapping):
        return {k: _cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu(v) for v in obj)
    return obj


class _StopFlag:
    signum: int | None = None


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_StopFlag]:
    """Turn SIGINT / SIGTERM into a flag checked at step boundaries (main thread only)."""
    flag = _StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum: int, frame: Any) -> None:
        flag.signum = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
