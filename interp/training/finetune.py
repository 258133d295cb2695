"""Fine-tuning until a train-accuracy target: study B's noise injection, for any model and task.

Study B forces a trained model to memorise new data (a noise set on new tokens) together with
its original training data, until the combined train accuracy exceeds 99.8%, and tracks the
original task's test accuracy along the way (the forgetting curve). `inject` does exactly that
for any hooked model and task (the vocabulary extension and the noise task live in `models`
and `tasks`; `analyses.studies.study_b` puts them together):

* full-batch AdamW on the task's `train` split; the stopping test uses the logits of the very
  forward pass that computes the loss, so it costs nothing and is exact for the parameters it
  stops at (accuracy *strictly* above `target_acc`);
* a step cap (`max_steps`): the summary says honestly whether the target was reached;
* every `eval_every` steps (and at the start and the end) every split and group is evaluated
  into `metrics.jsonl` (`test/acc` is the forgetting curve, `train/noise/acc` the memorisation);
* optional sphere constraint `weight_norm` as in `interp.training.loop` (projection after every
  step). Study B's choice (`analyses.studies.study_b`): keep the norm the extended model starts with,
  so step 0 is exactly the original function on original inputs;
* checkpoints at step 0, every `checkpoint_every` steps and at the stop, in the run format
  (`interp.store.checkpoint`), so every analysis opens the result; resuming is bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from interp.store.checkpoint import list_checkpoints, load_checkpoint, load_state_into, save_checkpoint
from interp.config import to_dict
from interp.splits import Task, split_digests
from interp.errors import CheckpointError, ConfigError
from interp.metrics import LOSSES, evaluate, per_example_loss
from interp.store.run_folder import append_metrics, create_run, is_done, mark_done, read_done, read_metrics, run_lock, truncate_metrics
from interp.training.loop import _cpu, _project


@dataclass(frozen=True)
class InjectionConfig:
    """How to fine-tune until the target.

    Attributes:
        lr: AdamW learning rate.
        betas: AdamW betas.
        weight_decay: AdamW decoupled weight decay (moot under `weight_norm`).
        target_acc: Stop once the train accuracy is strictly above this.
        max_steps: Stop after this many steps even if the target was not reached.
        eval_every: Evaluate every split every this many steps.
        checkpoint_every: Checkpoint every this many steps (plus step 0 and the stop).
        weight_norm: If set, project all trainable tensors onto ``||w|| = weight_norm`` before
            the first step and after every step.
        loss: ``"cross_entropy"`` or ``"mse"``.
        data_seed: Seed of the task's splits.
    """

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.0
    target_acc: float = 0.998
    max_steps: int = 20000
    eval_every: int = 10
    checkpoint_every: int = 1000
    weight_norm: float | None = None
    loss: str = "cross_entropy"
    data_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_steps", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}={value!r} must be a positive integer")
        if not self.lr > 0:
            raise ConfigError(f"lr={self.lr!r} must be > 0")
        if not 0 <= self.target_acc < 1:
            raise ConfigError(f"target_acc={self.target_acc!r} must be in [0, 1)")
        if self.loss not in LOSSES:
            raise ConfigError(f"loss={self.loss!r} is not supported", f"valid: {', '.join(LOSSES)}")
        if self.weight_norm is not None and not self.weight_norm > 0:
            raise ConfigError(f"weight_norm={self.weight_norm!r} must be > 0 (or None)")


def trainable_norm(model: nn.Module) -> float:
    """Joint L2 norm of all trainable tensors (what `weight_norm` constrains)."""
    with torch.no_grad():
        return float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p) for p in model.parameters() if p.requires_grad])))


def inject(
    run_dir: str | Path, model: nn.Module, task: Task, config: InjectionConfig, *,
    extra: dict[str, Any] | None = None, progress: bool = False,
) -> dict[str, Any]:
    """Fine-tune `model` (in place) on `task`'s train split until the target, into `run_dir`.

    Args:
        run_dir: The run folder (config.json holds model, task, `train` = this config, and
            `injection` = `extra`, e.g. the source checkpoint). Resumed if it has checkpoints.
        model: A hooked model with `.cfg` and `readout` (`fast_readout` used if present).
        task: Its splits must include `train`; all splits are evaluated.
        config: The fine-tuning config.
        extra: JSON-ready provenance stored under ``"injection"`` in config.json.
        progress: Show a progress bar.

    Returns:
        The summary written to DONE: ``reached`` (bool), ``steps``, ``target_acc``,
        ``max_steps``, ``final`` (the last metrics record) and ``train_acc_at_stop``.
    """
    run_config = {"model": {"kind": model.cfg.kind, **to_dict(model.cfg)}, "task": task.to_dict(),
                  "train": to_dict(config), "injection": dict(extra or {})}
    run_dir = create_run(run_dir, run_config)
    with run_lock(run_dir):
        if is_done(run_dir):
            return read_done(run_dir)
        summary = _Injection(run_dir, model, task, config).run(progress)
        mark_done(run_dir, summary)
        return summary


class _Injection:
    def __init__(self, run_dir: Path, model: nn.Module, task: Task, config: InjectionConfig) -> None:
        self.run_dir, self.model, self.config = run_dir, model, config
        self.splits = task.splits(config.data_seed)
        self.digests = split_digests(self.splits)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas,
                                           weight_decay=config.weight_decay)
        self.readout = getattr(model, "fast_readout", None) or model.readout
        self.step = self._resume()

    def _resume(self) -> int:
        if not list_checkpoints(self.run_dir):
            truncate_metrics(self.run_dir, -1)
            if self.config.weight_norm is not None:
                _project(self.model, self.config.weight_norm)
            self._evaluate(0)
            self._save(0)
            return 0
        ckpt = load_checkpoint(self.run_dir)
        if ckpt.meta.get("fingerprints") != self.digests:
            raise CheckpointError(f"the data of {self.run_dir} changed since {ckpt.path.name}", "inject into a new folder")
        load_state_into(self.model, ckpt.state_dict, where=str(ckpt.path))
        self.optimizer.load_state_dict(ckpt.train_state["optimizer"])
        truncate_metrics(self.run_dir, ckpt.step)
        return ckpt.step

    def run(self, progress: bool) -> dict[str, Any]:
        train, cfg = self.splits["train"], self.config
        reached, acc = False, 0.0
        with tqdm(total=cfg.max_steps, initial=self.step, disable=not progress, unit="step") as bar:
            while True:
                logits = self.readout(train.tokens).float()
                acc = (logits.argmax(-1) == train.labels).float().mean().item()
                if acc > cfg.target_acc:
                    reached = True
                    break
                if self.step >= cfg.max_steps:
                    break
                loss = per_example_loss(logits, train.labels, cfg.loss).mean()
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                if cfg.weight_norm is not None:
                    _project(self.model, cfg.weight_norm)
                self.step += 1
                bar.update(1)
                bar.set_postfix_str(f"train acc {acc:.4f}")
                if self.step % cfg.eval_every == 0:
                    self._evaluate(self.step)
                if self.step % cfg.checkpoint_every == 0:
                    self._save(self.step)
        records = read_metrics(self.run_dir)
        if records[-1]["step"] != self.step:
            self._evaluate(self.step)
            records = read_metrics(self.run_dir)
        if self.step not in list_checkpoints(self.run_dir):
            self._save(self.step)
        return {"reached": reached, "steps": self.step, "target_acc": cfg.target_acc, "max_steps": cfg.max_steps,
                "train_acc_at_stop": acc, "final": records[-1]}

    def _evaluate(self, step: int) -> None:
        self.model.eval()
        append_metrics(self.run_dir, {"step": step, **evaluate(self.model.readout, self.splits, self.config.loss)})
        self.model.train()

    def _save(self, step: int) -> None:
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        train_state = {"optimizer": _cpu(self.optimizer.state_dict())}
        save_checkpoint(self.run_dir, step, state, train_state, meta={"fingerprints": self.digests})
