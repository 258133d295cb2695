"""Study B's protocol: goldilocks AdamW run -> WLMD sample -> noise injection -> comparisons.

"The grokked illusion" (Zhang, Chan, Shang, Yang and Zhang, 2026; docs/study_b.md): two models
with perfect test accuracy on ``x + y mod p`` and the same weight norm, one trained with AdamW on
the sphere, one sampled at equilibrium by Wang-Landau molecular dynamics, differ in how much of the task they keep when
forced to memorise noise on new tokens. Each step below writes ordinary run folders, so every
registered analysis (`rank`, `drift`, ...) opens their checkpoints:

1. `goldilocks`: AdamW with the projection onto ``||w|| = R`` after every step (`interp.training.loop`).
2. `wlmd_sample`: WLMD on the same sphere, started from a checkpoint (our choice: from the
   goldilocks model, so the walkers start in the target region; see docs/study_b.md), entropy
   phase then production with S frozen, snapshots in the target window saved as checkpoints.
3. `inject`: extend the vocabulary by k new tokens (`models.vocab`), fine-tune on original train
   + noise until train accuracy > 99.8% (`interp.training.finetuning`); the norm is kept at the extended
   model's starting norm when the source run was norm-constrained.
4. The paper's comparisons (forgetting curves, effective ranks, cosines) are in
   `analyses.studies.study_b.figures`.

`analyses.studies.study_b.measure` runs all of it per seed at a configurable (CPU) scale, and
`analyses.studies.study_b.tables` builds the result tables.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from analyses.studies.study_b.settings import WLMDSettings
from interp.errors import ConfigError
from interp.splits import split_digests
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.atomic import atomic_write_json
from interp.training import TrainConfig, run_config, train
from interp.training.config import finetune_config
from interp.training.finetuning import finetune, trainable_norm
from interp.wlmd.cvs import ModelCVs
from interp.wlmd.grid import GridSpec, Schedule
from interp.wlmd.runs import wlmd_produce, wlmd_run
from interp.wlmd.sampler import WLMDConfig, walk_record
from models import build_model, load_model, preset_config
from models.vocab import extend_vocab
from tasks import ModAddTask, NoiseInjectionTask


def goldilocks(
    out: str | Path,
    *,
    p: int = 67,
    train_frac: float = 0.5,
    weight_norm: float = 30.0,
    epochs: int = 15000,
    lr: float = 1e-3,
    seed: int = 0,
    data_seed: int = 0,
    model_overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
    device: str = "cpu",
    **train_kwargs: Any,
) -> Path:
    """Train study B's AdamW-goldilocks model (`modadd-1l`, projected onto ``||w|| = weight_norm``)
    on `device`.
    """
    task = ModAddTask(p=p, train_frac=train_frac)
    model = build_model(preset_config("modadd-1l", task, **dict(model_overrides or {})), seed=seed)
    config = TrainConfig(
        epochs=epochs,
        lr=lr,
        weight_decay=0.0,
        weight_norm=weight_norm,
        seed=seed,
        data_seed=data_seed,
        **train_kwargs,
    )
    train(out, model, task, config, device=device, progress=progress)
    return Path(out)


def load_source(path: str | Path) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """The model, checkpoint and run config of a modular-addition run or checkpoint folder."""
    model, ckpt = load_model(path)
    return model, ckpt, ckpt.config


def source_cvs(source: str | Path, k: float = 6.0) -> tuple[float, float]:
    """Study B's collective variables ``(ln train loss, 10 mean sigmoid(k margin) on test)`` of a
    modular-addition run or checkpoint.
    """
    model, _, config = load_source(source)
    cvs = model_cvs(model, config, k)[0]
    with torch.no_grad():
        x, y = cvs(cvs.flatten()).tolist()
    return x, y


def model_cvs(
    model: torch.nn.Module, config: dict[str, Any], k: float, device: str = "cpu"
) -> tuple[ModelCVs, ModAddTask, dict[str, Any]]:
    """The CVs of `model` (moved to `device`) on its run's train and test splits (on `device`);
    the task and its splits (on the CPU, for their digests).
    """
    if config["task"].get("name") != "modadd":
        raise ConfigError(
            f"study B's WLMD needs a modular-addition run, not task {config['task'].get('name')!r}"
        )
    task = ModAddTask(**{k_: v for k_, v in config["task"].items() if k_ != "name"})
    splits = task.splits(config["train"]["data_seed"])
    # ModelCVs' default forward is the fast training forward (`models.fast_forward`): a 1-layer
    # model's readout attention mixes its values with one embedding_bag, no hooks run.
    on = {name: splits[name].to(device) for name in ("train", "test")}
    return ModelCVs(model.to(device), on["train"], on["test"], k=k), task, splits


def wlmd_sample(
    out: str | Path,
    source: str | Path,
    settings: WLMDSettings = WLMDSettings(),
    *,
    grid: GridSpec | None = None,
    schedule: Schedule | None = None,
    window: tuple[float, float, float, float] | None = None,
    starts: Sequence[str | Path] | None = None,
    device: str = "cpu",
    samples: str = "samples",
) -> tuple[Path, list[Path]]:
    """WLMD from the model of `source` on its sphere: entropy phase into ``out/entropy``,
    production into ``out/<samples>`` (one checkpoint per snapshot in the window; another
    name gives a finished walk a second, independent production).

    The grid, window and ``ln f`` schedule are `settings`' (its grid and window lie around the
    source's ``(x0, y0)``; default: the study's wide grid), unless `grid` / `window` /
    `schedule` give absolute ones. The radius is the source run's `weight_norm` (or its
    current norm). Every walker starts at the source model, or walker i at the model of
    ``starts[i]`` (runs or checkpoints of the same model and task, one per walker; the walk
    records each walker's cosine to its own start). The walk runs on `device`
    (`settings.engine` chooses how the walkers move).
    """
    model, ckpt, config = load_source(source)
    cvs, task, splits = model_cvs(model, config, settings.k, device)
    theta = cvs.flatten()
    radius = config["train"].get("weight_norm") or float(theta.norm())
    x0, y0 = cvs(theta).tolist()
    wcfg = WLMDConfig(
        grid=grid or settings.grid(x0, y0),
        schedule=schedule or settings.schedule(),
        sigma=(1.0, 1.0),
        dt=settings.dt,
        gamma=settings.gamma,
        kT=settings.kT,
        radius=radius,
        share_every=settings.share_every,
        seed=settings.seed,
        engine=settings.engine,
        wall_force=settings.wall_force,
    )
    walk = {"data_seed": config["train"]["data_seed"], "loss": "cross_entropy", "weight_norm": radius}
    out = Path(out)
    # The start relative to the walk's own run folders (entropy/ and samples/ are siblings), so
    # a measured folder that moves (another machine, `study_b_state.restore_state`) resumes.
    source_path = os.path.relpath(Path(ckpt.path).resolve(), (out / "entropy").resolve())
    folder_config = run_config(model, task, walk, source=source_path)
    migrate = _relative_source(out, source_path)
    digests = split_digests(splits)
    start = (
        theta.expand(settings.walkers, -1).clone()
        if starts is None
        else _starts(starts, config, settings, device)
    )
    sampler = _entropy_phase(out, folder_config, cvs, start, wcfg, settings, digests, migrate)
    saved = wlmd_produce(
        out / samples,
        folder_config,
        cvs,
        sampler,
        settings.production_steps,
        window or settings.window(x0, y0),
        every=settings.every,
        max_samples=settings.max_samples,
        checkpoint_every=settings.checkpoint_every,
        digests=digests,
        migrate=migrate,
    )
    return out, saved


def grid_holding(
    settings: WLMDSettings, target: tuple[float, float], starts: Sequence[tuple[float, float]]
) -> GridSpec:
    """`settings`' entropy grid around the target ``(x0, y0)``, exactly, when it holds every start's
    ``(x, y)``; otherwise extended, by whole bins of its own width, just far enough to hold them
    (a start outside the grid cannot walk; protocol 2's upper x wall stays where it is whenever
    it can).
    """
    base = settings.grid(*target)
    (x_lo, x_hi), (y_lo, y_hi) = base.x_range, base.y_range
    width_x, width_y = (x_hi - x_lo) / base.n_x, (y_hi - y_lo) / base.n_y
    xs, ys = [x for x, _ in starts], [y for _, y in starts]
    below_x = math.ceil(max(0.0, x_lo - min(xs)) / width_x + 0.5) if min(xs) <= x_lo else 0
    above_x = math.ceil(max(0.0, max(xs) - x_hi) / width_x + 0.5) if max(xs) >= x_hi else 0
    below_y = math.ceil(max(0.0, y_lo - min(ys)) / width_y + 0.5) if min(ys) <= y_lo else 0
    if not (below_x or above_x or below_y):
        return base
    return GridSpec(
        (x_lo - below_x * width_x, x_hi + above_x * width_x),
        (y_lo - below_y * width_y, y_hi),
        base.n_x + below_x + above_x,
        base.n_y + below_y,
        edges=base.edges,
    )


def _relative_source(out: Path, source: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Read a walk folder written when its config named the start by an absolute path as the
    same run when that path is the same checkpoint as `source` (relative to ``out/entropy``).
    """

    def migrate(stored: dict[str, Any]) -> dict[str, Any]:
        old = stored.get("source")
        if isinstance(old, str) and os.path.isabs(old):
            if Path(old).resolve() == (out / "entropy" / source).resolve():
                return {**stored, "source": source}
        return stored

    return migrate


def _starts(
    starts: Sequence[str | Path], config: Mapping[str, Any], settings: WLMDSettings, device: str
) -> torch.Tensor:
    """The flat parameters `[walkers, P]` of one start model per walker, checked against the source's config."""
    if len(starts) != settings.walkers:
        raise ConfigError(f"{len(starts)} starts for {settings.walkers} walkers", "give one start per walker")
    rows = []
    for path in starts:
        model, _, other = load_source(path)
        if other["model"] != config["model"] or other["task"] != config["task"]:
            raise ConfigError(
                f"start {path} is another model or task than the source's",
                "start every walker on the same task",
            )
        rows.append(model_cvs(model, other, settings.k, device)[0].flatten())
    return torch.stack(rows)


WALK_FILE = "walk.json"


def walk_records(folder: str | Path) -> list[dict[str, Any]]:
    """The records of a `wlmd_sample` folder's entropy phase (``folder/walk.json``; [] if none)."""
    path = Path(folder) / WALK_FILE
    return json.loads(path.read_text()) if path.exists() else []


def _entropy_phase(
    out: Path,
    folder_config: dict[str, Any],
    cvs: ModelCVs,
    start: torch.Tensor,
    config: WLMDConfig,
    settings: WLMDSettings,
    digests: Mapping[str, str],
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Any:
    """The entropy phase in chunks of `report_every` steps, each ending in a checkpoint and a
    `walk_record` appended to ``out/walk.json`` (rewritten atomically, so a kill leaves the
    previous list); it ends at `steps`, or with targets once they are met after at least `steps`
    (`WLMDSettings.targets_met`: every walker, or the median one, at most `target_cosine` from its
    start; ln f halved `target_halvings` times), or at the `budget`. Resumes: the
    run folder resumes bit-identically and a chunk whose record was lost is recorded again
    from its checkpoint.
    """
    records = walk_records(out)
    budget = settings.budget()
    sampler = None
    while True:
        step = records[-1]["step"] if records else 0
        finished = step >= budget or (step >= settings.steps and settings.targets_met(records[-1]))
        if finished and sampler is not None:
            return sampler
        target = step if finished else min(step + settings.report_every, budget) if records else 0
        sampler = wlmd_run(
            out / "entropy",
            folder_config,
            cvs,
            start,
            config,
            target,
            checkpoint_every=settings.checkpoint_every,
            digests=digests,
            migrate=migrate,
        )
        if not records or sampler.step > records[-1]["step"]:
            previous = torch.tensor(records[-1]["S"]) if records else None
            records.append(walk_record(sampler, start, previous))
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / WALK_FILE, records)


def inject(
    out: str | Path,
    source: str | Path,
    noise: str = "random",
    *,
    k: int = 37,
    new_classes: bool = False,
    config: TrainConfig | None = None,
    keep_norm: bool = True,
    seed: int = 0,
    progress: bool = False,
    device: str = "cpu",
) -> dict[str, Any]:
    """Extend the vocabulary of `source`'s model by `k` tokens and fine-tune on train + `noise`
    (on `device`).

    Returns `interp.training.finetuning.finetune`'s summary (``reached``, ``steps``, ``final``, ...).
    """
    model, ckpt, src = load_source(source)
    if src["task"].get("name") != "modadd":
        raise ConfigError(f"inject needs a modular-addition run, not task {src['task'].get('name')!r}")
    task = NoiseInjectionTask(
        p=src["task"]["p"], train_frac=src["task"]["train_frac"], k=k, noise=noise, new_classes=new_classes
    )
    extended = extend_vocab(model, k, k if new_classes else 0, seed=seed).train()
    norm = trainable_norm(extended)
    constrained = keep_norm and src["train"].get("weight_norm") is not None
    base = config or finetune_config()
    cfg = replace(
        base, data_seed=src["train"]["data_seed"], weight_norm=norm if constrained else base.weight_norm
    )
    extra = {
        "source": str(ckpt.path),
        "noise": noise,
        "k": k,
        "seed": seed,
        "norm_source": trainable_norm(model),
        "norm_extended": norm,
    }
    return finetune(out, extended, task, cfg, extra=extra, device=device, progress=progress)


def first_checkpoint(run: str | Path) -> Path:
    """The first checkpoint folder of a run (e.g. an injection run's step 0)."""
    return checkpoint_dir(run, list_checkpoints(run)[0])
