"""Fine-tuning until a train-accuracy target (e.g. noise injection), for any model and task.

Noise injection forces a trained model to memorise new data (a noise set on new tokens) together
with its original training data, until the combined train accuracy exceeds 99.8%, and tracks the
original task's test accuracy along the way (the forgetting curve). `finetune` does exactly that
for any hooked model and task (the vocabulary extension and the noise task live in `models`
and `tasks`; an experiment puts them together). It is `interp.training.loop.TrainLoop`
with a `TrainConfig` whose ``target_acc`` is set (`interp.training.config.finetune_config`):

* full-batch AdamW on the task's `train` split; the stopping test uses the logits of the very
  forward pass that computes the loss, so it costs nothing and is exact for the parameters it
  stops at (accuracy *strictly* above `target_acc`);
* a step cap (``epochs``; ``max_steps`` in the summary): it says honestly whether the target
  was reached;
* every `eval_every` steps (and at the start and the stop) every split and group is evaluated
  into `metrics.jsonl` (`test/acc` is the forgetting curve, `train/noise/acc` the memorisation);
* optional sphere constraint `weight_norm` (projection before the first step and after every
  step). Keeping the norm the extended model starts with makes step 0 exactly the original
  function on original inputs;
* checkpoints at step 0, every `checkpoint_every` steps and at the stop, in the run format, so
  every analysis opens the result; resuming (from any checkpoint, RNG included) is bit-identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from interp.config import from_dict, to_dict
from interp.errors import ConfigError
from interp.splits import Task, split_digests
from interp.store.run_folder import is_done
from interp.store.session import open_run
from interp.training.config import TrainConfig
from interp.training.loop import TrainLoop, run_config, stop_on_signals, trainable
from interp.training.precision import check_bf16


def trainable_norm(model: nn.Module) -> float:
    """Joint L2 norm of all trainable tensors (what `weight_norm` constrains)."""
    with torch.no_grad():
        return float(
            torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in trainable(model)]))
        )


def finetune(
    run_dir: str | Path,
    model: nn.Module,
    task: Task,
    config: TrainConfig,
    *,
    extra: dict[str, Any] | None = None,
    device: str = "cpu",
    progress: bool = False,
) -> dict[str, Any]:
    """Fine-tune `model` (in place) on `task`'s train split until the target, into `run_dir`.

    Args:
        run_dir: The run folder (config.json holds model, task, `train` = this config, and
            `injection` = `extra`, e.g. the source checkpoint). Resumed if it has checkpoints.
        model: A hooked model with `.cfg` and `readout` (`fast_readout` used if present).
        task: Its splits must include `train`; all splits are evaluated.
        config: How to train: full batch (``batch_size`` None), its ``target_acc`` the target
            (None: all ``epochs``), ``epochs`` the step cap (`interp.training.config.finetune_config`
            gives fine-tuning's defaults).
        extra: JSON-ready provenance stored under ``"injection"`` in config.json.
        device: Where to train; checkpoints are stored on the CPU.
        progress: Show a progress bar.

    Returns:
        The summary written to DONE: ``reached`` (bool), ``steps``, ``target_acc``,
        ``max_steps``, ``final`` (the last metrics record) and ``train_acc_at_stop``.

    Raises:
        ConfigError: If `config` asks for minibatches, or for bf16 on a CPU without native bf16
            (`interp.training.precision`).
        TrainingInterrupted: On SIGINT / SIGTERM, after saving a checkpoint.
    """
    if config.batch_size is not None:
        raise ConfigError(
            f"fine-tuning trains full batch, but batch_size is {config.batch_size}", "leave batch_size unset"
        )
    # Before the folder exists (a refused run leaves nothing); a finished run is only read.
    check_bf16(config.bf16 and not is_done(run_dir), device)
    splits = task.splits(config.data_seed)
    with open_run(
        run_dir,
        run_config(model, task, config, injection=dict(extra or {})),
        split_digests(splits),
        migrate=_current_train_config,
    ) as run:
        if (done := run.finished()) is not None:
            return done
        loop = TrainLoop(run, model.to(device), splits, config, device)
        loop.resume()
        with stop_on_signals() as stop:
            loop.run(stop, progress, desc="fine-tune")
        return loop.finish(
            {
                "reached": loop.reached,
                "steps": loop.step,
                "target_acc": config.target_acc,
                "max_steps": config.epochs,  # the name DONE summaries have always used
                "train_acc_at_stop": loop.train_acc,
                "final": run.metrics()[-1],
            }
        )


def _current_train_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run's stored config with its ``train`` section in the current form (`TrainConfig.migrate`):
    a fine-tuning run started before fine-tuning took a `TrainConfig` resumes.
    """
    return {**config, "train": to_dict(from_dict(TrainConfig, config["train"]))}
