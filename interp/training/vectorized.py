"""Vectorised multi-seed training: seeds of one shape trained as one stacked model (`torch.func`).

`train_vectorized(run_dirs, models, task, configs)` produces the same runs as calling
`interp.training.train` once per seed - the same run folders, metrics, checkpoints, milestones
and `DONE` - but takes every seed's step at once:

* the seeds' parameters are stacked along a new leading dimension ``[seeds, *shape]``;
* ``vmap(grad(loss))`` over the stacked parameters computes every seed's gradient in one
  batched forward and backward pass (`torch.func.functional_call` runs the model's own
  training forward, e.g. `models.fast_forward.fast_readout`, with each seed's weights);
* one AdamW updates the stacked tensors. AdamW is elementwise and its step count is shared, so
  this is exactly each seed's own AdamW; the norm projection is done per seed.

On a GPU this turns many small kernels into a few large ones, which is where it pays; on a CPU
separate processes (`interp train --seeds`) are usually faster (`benchmarks/multi_seed.py
--seeds N` measures both).

Numerics: the batched matmuls sum in another order than the per-seed ones, so one vectorised
step equals each seed's separate step from the same state up to float rounding (tested), not
bit for bit; over many steps the two trajectories drift apart wherever rounding decides a kink
(a ReLU gate within rounding of zero), as any two summation orders do. So each run records its
engine (`TrainConfig.engine`: ``"vectorized"``) and resumes only with it (`check_engine`): a
vectorised group resumed vectorised is bit-identical to an uninterrupted one (CPU), and
`train` refuses its folders. Everything else of the engine holds: evaluation and checkpoints on
the same schedule (the stacked state is copied into each seed's `TrainLoop` first: this module
replaces only `TrainLoop.epoch`), SIGINT / SIGTERM save every seed, and a seed that diverges
stops logging and saving (its `DONE` says where it diverged) while the others train on. Each
seed's folder is otherwise an ordinary run folder that every reader opens.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap
from tqdm import tqdm

from interp.config import to_dict
from interp.errors import ConfigError, TrainingInterrupted
from interp.metrics import full_precision, per_example_loss
from interp.splits import Task, split_digests
from interp.store.run_folder import check_engine, is_done
from interp.store.session import RunSession, open_run
from interp.training.config import TRAIN_ENGINE, TrainConfig
from interp.training.loop import (
    StopFlag,
    TrainLoop,
    project_to_sphere,
    run_config,
    show_accuracies,
    stop_on_signals,
    training_forward,
)
from interp.training.precision import check_bf16


def train_vectorized(
    run_dirs: Sequence[str | Path],
    models: Sequence[nn.Module],
    task: Task,
    configs: Sequence[TrainConfig],
    *,
    device: str = "cpu",
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Train several seeds of one model shape on `task` as one vectorised model.

    Args:
        run_dirs: One run folder per seed (created if needed; resumed if they hold checkpoints).
        models: One hooked model per seed, all with the same config, each built with its
            config's seed; trained in place.
        task: The task, shared by every seed.
        configs: One `TrainConfig` per seed, equal in every field but `seed`. Each run records
            ``engine: "vectorized"`` in its config (whatever `engine` the configs hold).
        device: Where to train; checkpoints are stored on the CPU.
        progress: Show one progress bar with the seeds' mean accuracies.

    Returns:
        Each run's summary (as written to its `DONE`), in the order of `run_dirs`. Finished runs
        are not retrained.

    Raises:
        ConfigError: If the seeds differ in anything but the seed, or a folder holds another run
            (or one the separate engine trained: `check_engine`), or they ask for bf16 on a CPU
            without native bf16 (`interp.training.precision`).
        CheckpointError: If a run's checkpoints are damaged or its data changed.
        TrainingInterrupted: On SIGINT / SIGTERM, after saving every seed's checkpoint.
    """
    configs = [dataclasses.replace(config, engine="vectorized") for config in configs]
    _check_group(models, configs, len(run_dirs))
    for run_dir in run_dirs:  # before any folder is created
        check_engine(run_dir, "vectorized", **TRAIN_ENGINE)
    # The seeds share bf16 (`_check_group`); finished runs are only read.
    check_bf16(configs[0].bf16 and not all(is_done(d) for d in run_dirs), device)
    splits = task.splits(configs[0].data_seed)
    digests = split_digests(splits)
    with contextlib.ExitStack() as stack:
        runs = [
            stack.enter_context(open_run(d, run_config(m, task, c), digests))
            for d, m, c in zip(run_dirs, models, configs)
        ]
        todo = [i for i, run in enumerate(runs) if run.finished() is None]
        if todo:
            start = _common_step([runs[i] for i in todo])
            loops = [TrainLoop(runs[i], models[i].to(device), splits, configs[i], device) for i in todo]
            for loop in loops:
                loop.resume(start)
                loop.cpu_share = len(loops)
            with stop_on_signals() as stop:
                StackedSeeds(loops).run(stop, progress)
            for loop in loops:
                loop.finish(loop.summary(getattr(task, "milestones", {})))
        return [run.finished() for run in runs]


def _check_group(models: Sequence[nn.Module], configs: Sequence[TrainConfig], n_runs: int) -> None:
    if not (n_runs == len(models) == len(configs)) or n_runs == 0:
        raise ConfigError(
            f"got {n_runs} run folders, {len(models)} models and {len(configs)} configs",
            "give one of each per seed, at least one",
        )
    if configs[0].target_acc is not None:  # one stop for all seeds would not be each seed's own
        raise ConfigError(
            f"vectorised seeds train every seed for all epochs, but target_acc is {configs[0].target_acc}",
            "train runs with a target one at a time (interp.training.loop.train)",
        )
    first = {k: v for k, v in to_dict(configs[0]).items() if k != "seed"}
    for config in configs[1:]:
        other = {k: v for k, v in to_dict(config).items() if k != "seed"}
        for key in first:
            if first[key] != other[key]:
                raise ConfigError(
                    f"vectorised seeds must share every training setting but the seed; "
                    f"{key} is {first[key]!r} and {other[key]!r}",
                    "train them as separate groups",
                )
    shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in models]
    for model, shape in zip(models[1:], shapes[1:]):
        if model.cfg != models[0].cfg or shape != shapes[0]:
            raise ConfigError(
                "vectorised seeds must share one model config (one shape)",
                "train differently shaped models as separate groups",
            )


def _common_step(runs: Sequence[RunSession]) -> int:
    """The latest step every run has a checkpoint of (-1: start afresh).

    Seeds are saved one after another, so a kill can leave some one checkpoint ahead; they
    all restart from the last step they share (the schedule is the same for every seed).
    """
    shared = set.intersection(*(set(run.checkpoints()) for run in runs))
    return max(shared, default=-1)


class _Forward(nn.Module):
    """`model`'s training forward as a module that `functional_call` can run with other weights."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor) -> Tensor:
        return training_forward(self.model)(tokens)


class StackedSeeds:
    """The seeds' parameters and AdamW state stacked along dim 0, stepped as one.

    `loops` are the seeds' ordinary `TrainLoop`s, already resumed at one common step: they keep
    the run folders, schedules, evaluation and checkpointing; this class replaces only their
    `epoch`, and copies the stacked state back into them (`sync`) whenever they evaluate or save.
    """

    def __init__(self, loops: list[TrainLoop]) -> None:
        self.loops = loops
        self.config: TrainConfig = loops[0].config
        self.device = loops[0].device
        self.step = loops[0].step
        self.module = _Forward(loops[0].model)  # the stateless template that functional_call fills in
        own = [dict(loop.model.named_parameters()) for loop in loops]
        self.params = {n: torch.stack([params[n].detach() for params in own]) for n in own[0]}
        buffers = [dict(loop.model.named_buffers()) for loop in loops]
        self.buffers = {f"model.{n}": torch.stack([b[n] for b in buffers]) for n in buffers[0]}
        c = self.config
        self.optimizer = torch.optim.AdamW(
            list(self.params.values()), lr=c.lr, betas=c.betas, weight_decay=c.weight_decay
        )
        self._load_optimizer_states()
        self._grad = vmap(grad(self._loss), in_dims=(0, 0, None, None))
        self._grad_batched = vmap(grad(self._loss), in_dims=(0, 0, 0, 0))  # minibatches: one order per seed

    def _load_optimizer_states(self) -> None:
        """Stack the seeds' AdamW states (empty on a fresh run) into the stacked optimizer's."""
        states = [loop.optimizer.state_dict()["state"] for loop in self.loops]
        for i, stacked in enumerate(self.params.values()):
            if i not in states[0]:
                continue
            steps = {float(s[i]["step"]) for s in states}
            if len(steps) != 1:  # cannot happen after a common-step resume; guard the invariant
                raise RuntimeError(f"seeds resumed at different optimizer steps {sorted(steps)}")
            self.optimizer.state[stacked] = {
                k: v.clone() if k == "step" else torch.stack([s[i][k] for s in states]).to(self.device)
                for k, v in states[0][i].items()
            }

    def _loss(
        self, params: dict[str, Tensor], buffers: dict[str, Tensor], tokens: Tensor, labels: Tensor
    ) -> Tensor:
        """One seed's training loss (under `vmap`, `params` are that seed's slices)."""
        device_type = torch.device(self.device).type
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=self.config.bf16):
            logits = functional_call(
                self.module, ({f"model.{n}": p for n, p in params.items()}, buffers), (tokens,)
            )
        return per_example_loss(full_precision(logits), labels, self.config.loss).mean()

    def run(self, stop: StopFlag, progress: bool) -> None:
        """Train every seed to the last epoch; evaluate and save on the shared schedule."""
        config = self.config
        bar = tqdm(
            total=config.epochs,
            initial=max(self.step, 0),
            disable=not progress,
            unit="epoch",
            dynamic_ncols=True,
            desc=f"{len(self.loops)} seeds",
        )
        with bar:
            if self.step < 0:  # fresh runs: record and save the initial states as epoch 0
                self._advance(bar, 0)
            # A diverged seed stays in the stack (vmap keeps seeds apart: its NaNs touch no other
            # seed, and the others' sums keep their order) but logs and saves nothing more.
            while self.step < config.epochs and any(loop.diverged is None for loop in self.loops):
                if stop.signum is not None:
                    self.sync()
                    for loop in self.loops:
                        loop.save()
                    where = os.path.commonpath([loop.session.run_dir for loop in self.loops])
                    raise TrainingInterrupted(stop.signum, self.step, f"every seed's folder under {where}")
                self.epoch()
                bar.update(1)
                self._advance(bar, self.step + 1)
        self.sync()  # the caller's models end with their trained weights

    def _advance(self, bar: tqdm, step: int) -> None:
        self.step = step
        for loop in self.loops:
            loop.step = step
        if step in self.loops[0].eval_steps or step in self.loops[0].ckpt_steps:
            self.sync()
            show_accuracies(bar, [loop.after_step() for loop in self.loops])

    def epoch(self) -> None:
        """One epoch of every seed in one stacked step (or one per minibatch)."""
        # Each seed draws its own order from its own generator, as a separate run does.
        batches = [loop.batches() for loop in self.loops]
        for k, first in enumerate(batches[0]):
            self.train_step(None if isinstance(first, slice) else torch.stack([b[k] for b in batches]))

    def train_step(self, index: Tensor | None) -> None:
        """One AdamW step of every seed (then each seed's sphere projection, if configured).

        Public so that a test can compare one step of this engine with the separate one
        (`TrainLoop.train_step`) from one shared state: build the `StackedSeeds` from loops
        holding that state, step, `sync`.

        Args:
            index: None for the full train split, or each seed's own train rows ``[seeds, batch]``.
        """
        train = self.loops[0].splits["train"]
        if index is None:
            grads = self._grad(self.params, self.buffers, train.tokens, train.labels)
        else:
            grads = self._grad_batched(self.params, self.buffers, train.tokens[index], train.labels[index])
        for name, stacked in self.params.items():
            stacked.grad = grads[name]
        self.optimizer.step()
        if self.config.weight_norm is not None:
            for seed in range(len(self.loops)):  # each seed's slices, as its own run projects them
                project_to_sphere([p[seed] for p in self.params.values()], self.config.weight_norm)

    @torch.no_grad()
    def sync(self) -> None:
        """Copy each seed's slice of the stacked parameters and AdamW state into its own loop."""
        for s, loop in enumerate(self.loops):
            own = dict(loop.model.named_parameters())
            for name, stacked in self.params.items():
                own[name].copy_(stacked[s])
                state = self.optimizer.state.get(stacked)
                if state:
                    loop.optimizer.state[own[name]] = {
                        k: v.clone() if k == "step" else v[s].clone() for k, v in state.items()
                    }
