"""The training engine: one public loop that every training variant builds on, exactly resumable.

`train(run_dir, model, task, config)` trains full batch by default (minibatches optional) with
AdamW, cross-entropy at the readout position or MSE against one-hot targets, and
optionally projects all trainable tensors back onto the sphere `||w|| = R` after every step
(training at a fixed weight norm). It evaluates every split and group on a schedule
(`interp.training.eval_steps`), logs the records to `metrics.jsonl`, checkpoints on a schedule
of its own, and writes `DONE` with the run's milestones at the end.

`TrainLoop` is that loop, public so the other engines compose it instead of copying it:
`interp.training.vectorized` replaces only its `epoch` (all seeds in one stacked step), and
`interp.training.finetuning` runs it with a train-accuracy target. The run folder's life cycle
(lock, skip if done, resume with digest checks, log, save, finish) is `interp.store.RunSession`.

Never losing work:

* everything that determines the future (weights, optimizer state, minibatch RNG, step) is in
  each checkpoint, and metrics past the resumed checkpoint are dropped and recomputed, so
  resuming after a `kill -9` gives bit-identical weights and metrics (same machine, CPU);
* SIGINT / SIGTERM / SIGHUP are turned into a checkpoint at the next step boundary
  (`interp.signals.stop_on_signals`, re-exported here), then `TrainingInterrupted` (the CLI
  exits 130 / 143 / 129); so is the end of a sweep worker's supervising process;
* a finished run (`DONE`) is not retrained, and a lock keeps two processes out of one folder;
* a run whose weights or evaluated losses become NaN or inf stops at that evaluation (or
  checkpoint) without saving it: LATEST keeps the last finite checkpoint, and `DONE` records
  ``diverged: {step, tensor, value, checkpoint}`` so reports list it apart.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from interp.config import to_dict
from interp.dissect.measures import check_measures, measure_record
from interp.errors import ConfigError, TrainingInterrupted
from interp.metrics import evaluate, full_precision, mean_loss, milestones
from interp.plugins import provenance
from interp.signals import StopFlag, stop_on_signals
from interp.splits import Split, Task, split_digests
from interp.store.checkpoint import load_state_into
from interp.store.formats import first_nonfinite
from interp.store.run_folder import check_engine, is_done, read_compute, write_compute
from interp.store.session import RunSession, open_run
from interp.training.config import TRAIN_ENGINE, TrainConfig
from interp.training.eval_steps import schedule
from interp.training.precision import check_bf16


def run_config(model: nn.Module, task: Task, config: Any, **extra: Any) -> dict[str, Any]:
    """The `config.json` content of a run: model, task and training configs, plus `extra` sections.

    Args:
        model: A model with a `.cfg` dataclass that has a `kind`.
        task: The task (its `to_dict()`).
        config: The training config: a dataclass, or a plain mapping (e.g. a WLMD run's settings).
        **extra: More top-level sections (e.g. ``injection={...}``, ``source="..."``).
    """
    train = to_dict(config) if dataclasses.is_dataclass(config) else dict(config)
    task_dict = task.to_dict()
    # A plugin's task: its package and version, so opening the run without it says what to install.
    plugin = provenance("interp.tasks", task_dict["name"])
    return {
        "model": {"kind": model.cfg.kind, **to_dict(model.cfg)},
        "task": task_dict,
        "train": train,
        **({"plugins": {"interp.tasks": {task_dict["name"]: plugin}}} if plugin else {}),
        **extra,
    }


def training_forward(model: nn.Module) -> Callable[[Tensor], Tensor]:
    """The forward that training uses: the model's `fast_readout` if it has one, else `readout`.

    Both map tokens ``[batch, pos]`` to readout logits ``[batch, d_vocab_out]``; the fast one
    skips work no loss needs and runs no hooks (analyses use the hooked forward).
    """
    return getattr(model, "fast_readout", None) or model.readout


@torch.no_grad()
def project_to_sphere(params: Iterable[Tensor], radius: float) -> None:
    """Rescale the tensors together, in place, so that their joint L2 norm is `radius`."""
    params = list(params)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p) for p in params]))
    for p in params:
        p.mul_(radius / norm)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters a weight-norm constraint applies to (those that require grad)."""
    return [p for p in model.parameters() if p.requires_grad]


def cpu_copy(obj: Any) -> Any:
    """A copy of a nested state (dicts, lists, tensors) with every tensor detached on the CPU."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, Mapping):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return obj


def train(
    run_dir: str | Path,
    model: nn.Module,
    task: Task,
    config: TrainConfig,
    *,
    device: str = "cpu",
    progress: bool = True,
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
        ConfigError: If `run_dir` holds a run with another config, or one the vectorised
            engine trained (`check_engine`), or `config.engine` is not ``"separate"``, or
            `config.bf16` is set on a CPU without native bf16 (`interp.training.precision`).
        CheckpointError: If the run's checkpoints are damaged or its data changed.
        TrainingInterrupted: On SIGINT / SIGTERM / SIGHUP, after saving a checkpoint.
    """
    if config.engine != "separate":
        raise ConfigError(
            f"TrainConfig.engine = {config.engine!r}, but train() is the separate engine",
            "train stacked seeds with interp.training.train_vectorized",
        )
    check_engine(run_dir, "separate", **TRAIN_ENGINE)
    # Before the folder exists (a refused run leaves nothing); a finished run is only read.
    check_bf16(config.bf16 and not is_done(run_dir), device)
    splits = task.splits(config.data_seed)
    with open_run(run_dir, run_config(model, task, config), split_digests(splits)) as run:
        if (done := run.finished()) is not None:
            return done
        loop = TrainLoop(run, model.to(device), splits, config, device)
        loop.resume()
        with stop_on_signals() as stop:
            loop.run(stop, progress)
        return loop.finish(loop.summary(getattr(task, "milestones", {})))


class TrainLoop:
    """One training session of one model: AdamW steps, scheduled evaluation and checkpoints.

    Everything durable is in the run folder; this object holds only what a checkpoint restores.
    Other engines may read and drive its public attributes.

    Attributes:
        session: The open run folder.
        model: The model, trained in place.
        splits: The task's splits, on `device`.
        config: The training config.
        optimizer: The model's AdamW.
        generator: The minibatch-order RNG (seeded by `config.seed`; checkpointed).
        eval_steps: The steps at which `after_step` evaluates.
        ckpt_steps: The steps at which `after_step` checkpoints.
        step: The last completed step (-1 before the initial state is recorded).
        target_acc: `config.target_acc`: if set, training stops before the first step at which
            the full-batch train accuracy of the training forward is strictly above it
            (`reached` says whether).
    """

    def __init__(
        self,
        session: RunSession,
        model: nn.Module,
        splits: Mapping[str, Split],
        config: TrainConfig,
        device: str = "cpu",
    ) -> None:
        self.session, self.model, self.config, self.device = session, model, config, device
        self.splits = {name: split.to(device) for name, split in splits.items()}
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
        )
        self.generator = torch.Generator().manual_seed(config.seed)
        self.forward = training_forward(model)
        self.eval_steps = set(
            schedule(config.epochs, config.eval_every, config.eval_log_points, include_zero=True)
        )
        self.ckpt_steps = set(
            schedule(config.epochs, config.checkpoint_every, config.checkpoint_log_points, include_zero=True)
        )
        self.target_acc, self.reached, self.train_acc = config.target_acc, False, float("nan")
        check_measures(config.eval_measures, model, self.splits)
        self.step = -1
        self.diverged: dict[str, Any] | None = None
        # CPU time: what earlier sessions recorded (compute.json), plus this process's since
        # the resume, divided among the runs it trains at once (stacked seeds).
        self.cpu_before: float | None = 0.0
        self.cpu_share = 1
        self._cpu_start = time.process_time()

    def resume(self, step: int | None = None) -> None:
        """Continue from the checkpoint of `step` (None: the latest; -1: start afresh)."""
        ckpt = self.session.resume(step)
        self._cpu_start = time.process_time()
        if ckpt is not None:  # None: trained by an interp that did not count CPU time
            self.cpu_before = read_compute(self.session.run_dir)
        if ckpt is None:
            self.step = -1
            if self.config.weight_norm is not None:
                project_to_sphere(trainable(self.model), self.config.weight_norm)
            return
        load_state_into(
            self.model, {k: v.to(self.device) for k, v in ckpt.state_dict.items()}, where=str(ckpt.path)
        )
        self.optimizer.load_state_dict(ckpt.train_state["optimizer"])
        self.generator.set_state(ckpt.train_state["generator"])
        self.step = ckpt.step

    def run(
        self,
        stop: StopFlag,
        progress: bool,
        *,
        epoch: Callable[[], bool] | None = None,
        desc: str | None = None,
    ) -> None:
        """Train until the last epoch (or the target), evaluating and checkpointing on schedule.

        Args:
            stop: Set by `stop_on_signals`; checked at every step boundary.
            progress: Show a progress bar.
            epoch: What one epoch does (default: `self.epoch`); it returns False to stop early.
            desc: The progress bar's label.
        """
        epoch = epoch or self.epoch
        bar = tqdm(
            total=self.config.epochs,
            initial=max(self.step, 0),
            disable=not progress,
            unit="epoch",
            dynamic_ncols=True,
            desc=desc,
        )
        with bar:
            if self.step < 0:  # a fresh run: record and save the initial state as epoch 0
                self.step = 0
                show_accuracies(bar, [self.after_step()])
            while self.step < self.config.epochs and self.diverged is None:
                if stop.signum is not None:
                    self.save()
                    raise TrainingInterrupted(stop.signum, self.step, self.session.run_dir)
                if not epoch():
                    break
                self.step += 1
                bar.update(1)
                show_accuracies(bar, [self.after_step()])
        self.finish_step()

    def epoch(self) -> bool:
        """One pass over the train split (one step if full batch). False: the target is reached."""
        return all(self.train_step(index) for index in self.batches())  # stops at the target

    def batches(self) -> list[Tensor | slice]:
        """The train rows of each optimizer step of one epoch, in order.

        Full batch: ``[slice(None)]``. Minibatches: consecutive pieces (``[batch_size]`` row
        indices, the last one possibly shorter) of a fresh random order drawn from `generator`,
        which this advances exactly as the epoch it plans does.
        """
        n = len(self.splits["train"])
        size = self.config.batch_size or n
        if size >= n:
            return [slice(None)]
        order = torch.randperm(n, generator=self.generator).to(self.device)
        return [order[start : start + size] for start in range(0, n, size)]

    def train_step(self, index: Tensor | slice) -> bool:
        """One AdamW step on the train rows `index` (then the sphere projection, if configured).

        Public so that a test can compare one step of two engines from one shared state.

        Returns:
            False, without stepping, if these rows' accuracy is above `target_acc`.
        """
        train = self.splits["train"]
        with torch.autocast(
            device_type=torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.config.bf16
        ):
            logits = self.forward(train.tokens[index])
        if self.target_acc is not None and self._reached(logits, train.labels[index]):
            return False
        loss = mean_loss(full_precision(logits), train.labels[index], self.config.loss)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.config.weight_norm is not None:
            project_to_sphere(trainable(self.model), self.config.weight_norm)
        return True

    def _reached(self, logits: Tensor, labels: Tensor) -> bool:
        # The test uses the logits of the forward that computes the loss: free, and exact for
        # the parameters training stops at.
        self.train_acc = (full_precision(logits).argmax(-1) == labels).float().mean().item()
        self.reached = self.train_acc > self.target_acc
        return self.reached

    def after_step(self) -> dict[str, Any] | None:
        """Evaluate and checkpoint if the schedule says so; return the metrics record if any.

        Both check first that the weights (and the evaluated metrics) are finite; if one is not,
        nothing is logged or saved, `diverged` says where, and the run stops.
        """
        record = self.evaluate() if self.step in self.eval_steps else None
        if self.step in self.ckpt_steps:
            self.save()
        return record

    def finite(self) -> bool:
        """Whether the run has not diverged; checks the weights now (NaN or inf: it has)."""
        if self.diverged is None and (bad := first_nonfinite(self.model.state_dict())) is not None:
            self._diverge(*bad)
        return self.diverged is None

    def _diverge(self, tensor: str, value: str) -> None:
        saved = self.session.checkpoints()
        self.diverged = {
            "step": self.step,
            "tensor": tensor,
            "value": value,
            "checkpoint": saved[-1] if saved else None,
        }

    def finish_step(self) -> None:
        """Make sure the final state is evaluated and saved (a target can stop off schedule)."""
        if self.diverged is not None:
            return
        if self.target_acc is not None and not self.reached and self.step >= self.config.epochs:
            with torch.no_grad():
                self._reached(self.forward(self.splits["train"].tokens), self.splits["train"].labels)
        records = self.session.metrics()
        if not records or records[-1]["step"] != self.step:
            self.evaluate()
        if self.step not in self.session.checkpoints():
            self.save()

    def evaluate(self) -> dict[str, Any] | None:
        """Evaluate every split and group with the hooked forward and log the record.

        Returns None and logs nothing once the weights or a metric are not finite (`diverged`).
        """
        if not self.finite():
            return None
        record = {"step": self.step, **evaluate(self.model.readout, self.splits, self.config.loss)}
        bad = next((k for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is not None:
            self._diverge(bad, str(record[bad]))
            return None
        # Circuit measures after the finiteness check: an undefined measure (NaN) is not divergence.
        record.update(measure_record(self.model, self.splits, self.config.eval_measures, self.config.loss))
        self.session.log(record)
        return record

    def save(self) -> None:
        """Checkpoint the weights, the optimizer and the minibatch RNG at the current step.

        A diverged run (weights not finite) saves nothing: LATEST keeps its last finite state.
        """
        if not self.finite():
            return
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        train_state = {
            "optimizer": cpu_copy(self.optimizer.state_dict()),
            "generator": self.generator.get_state(),
        }
        self.session.save(self.step, state, train_state)
        self.record_cpu()

    def cpu_seconds(self) -> float | None:
        """The run's CPU time so far, each earlier session counted up to its last checkpoint.

        None if an earlier session did not record it (an older interp).
        """
        if self.cpu_before is None:
            return None
        return self.cpu_before + (time.process_time() - self._cpu_start) / self.cpu_share

    def record_cpu(self) -> None:
        """Write the CPU time so far to `compute.json` (beside the checkpoints, not in them: a
        checkpoint holds only what determines the run, so two processes write identical ones).
        """
        if (cpu := self.cpu_seconds()) is not None:
            how = "process CPU time (every thread) of its training sessions, each up to its last checkpoint"
            if self.cpu_share > 1:
                how += f"; a 1/{self.cpu_share} share of {self.cpu_share} stacked seeds"
            write_compute(self.session.run_dir, cpu, how)

    def summary(self, targets: Mapping[str, Any]) -> dict[str, Any]:
        """The `DONE` summary: epochs, the final record, the task's milestones (and `diverged`)."""
        records = self.session.metrics()
        summary = {
            "epochs": self.step,
            "final": records[-1] if records else {"step": None},
            "milestones": milestones(records, targets),
        }
        if self.diverged is not None:
            summary["diverged"] = dict(self.diverged)
        return summary

    def finish(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """Record the run's CPU time (`compute.json`), then write `DONE` with `summary`."""
        self.record_cpu()
        return self.session.finish(summary)


def show_accuracies(bar: tqdm, records: list[dict[str, Any] | None]) -> None:
    """Show the split accuracies of the records (their mean over several seeds) on the bar."""
    records = [r for r in records if r is not None]
    if records:
        keys = [k for k in records[0] if k.count("/") == 1 and k.endswith("/acc")]
        bar.set_postfix_str(
            " ".join(f"{k[:-4]} {sum(r[k] for r in records) / len(records):.3f}" for k in keys)
        )
