"""`interp train`: turn CLI options into run specs, and train them (one, or many seeds).

Part of the composition root (`interp.cli`). Options merge as every run's do, in
`analyses.recipes`: the task's and `TrainConfig`'s own defaults, then the preset's
study settings, then what the user gave. The specs then train through `analyses.training`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import click

from interp.cli.options import config_options, given, parse_seeds
from interp.errors import ConfigError
from interp.store.run_folder import check_engine, check_same_config, check_unlocked
from interp.sweep.specs import RunSpec
from interp.text import format_table
from interp.training.config import TRAIN_ENGINE, TrainConfig
from interp.training.precision import BF16_FALLBACKS
from tasks import task_families


def runs_from_options(
    *,
    preset: str | None,
    task_name: str | None,
    seed: int | None,
    seeds: list[int] | None,
    out: str | None,
    resume: str | None,
    task_options: dict[str, Any],
    train_options: dict[str, Any],
) -> list[RunSpec]:
    """Validate the options and return one `RunSpec` per run to train.

    Raises:
        ConfigError: On conflicting or missing options, or any invalid config value.
    """
    if resume is not None:
        given = [
            name
            for name, value in [
                ("--preset", preset),
                ("--task", task_name),
                ("--seed", seed),
                ("--seeds", seeds),
                ("--out", out),
            ]
            if value is not None
        ]
        given += [f"--{k.replace('_', '-')}" for k in {**task_options, **train_options}]
        if given:
            raise ConfigError(
                f"--resume continues a run as configured; {given[0]} cannot be changed", "drop it"
            )
        return [_spec_from_run(Path(resume))]
    if out is None:
        raise ConfigError("--out is required to start a run", "give a new run folder, or --resume RUN")
    if seed is not None and seeds is not None:
        raise ConfigError("--seed and --seeds are exclusive", "use --seeds 0-7 for several seeds")
    from analyses.recipes import DEFAULT_PRESET, plan_runs

    train = {**train_options, "seed": seed or 0}
    return plan_runs(preset or DEFAULT_PRESET, task_options, train, seeds, out, task_name=task_name)


def apply_bf16_fallback(
    specs: list[RunSpec], fallback: str, device: str, *, resume: str | None
) -> tuple[list[RunSpec], str | None]:
    """The specs to train where bf16 is not native on this CPU, and the note to print if any.

    A run that asks for bf16 is refused (``fallback="refuse"``) or trains in fp32 and records
    ``bf16: false`` (``"fp32"``: what it really ran). An unfinished bf16 run given to
    ``--resume`` is always refused: its config cannot change.

    Raises:
        ConfigError: When a bf16 run is refused (`interp.training.precision.check_bf16`).
    """
    asks = [spec for spec in specs if spec.train.get("bf16")]
    if not asks:
        return specs, None
    from interp.store.run_folder import is_done
    from interp.training.precision import bf16_native, check_bf16, cpu_bf16

    if bf16_native(device):
        return specs, None
    if resume is None and fallback == "fp32":
        note = (
            f"note: {cpu_bf16().describe()}: training in fp32 (--bf16-fallback fp32; recorded as bf16 false)"
        )
        return [replace(spec, train={**spec.train, "bf16": False}) for spec in specs], note
    if resume is not None:
        where, instead = f"{resume} trains in bf16", "resume it on a CPU with native bf16"
    else:
        where, instead = "--bf16", "drop --bf16, or add --bf16-fallback fp32 to train in fp32"
    # A finished run is only read: it is never refused.
    check_bf16(not all(is_done(spec.out) for spec in asks), device, where=where, instead=instead)
    return specs, None


def _spec_from_run(run_dir: Path) -> RunSpec:
    from interp.store.run_folder import read_config

    config = read_config(run_dir)
    return RunSpec(run_dir, config["model"], config["task"], config["train"])


def check_device(device: str, *, here: bool = True) -> None:
    """Refuse a `--device` that is not cpu, cuda or cuda:N, or (`here`: it trains on this
    machine) a GPU torch does not see (ConfigError, exit 2). A job sent to a cluster
    (`here=False`) is only parsed: the login node need not have the GPU.
    """
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise ConfigError(f"--device {device!r} is not a device", "use cpu, cuda or cuda:N")
    if here and parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {device!r} is not available: torch sees no GPU", "use --device cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {device!r} is not available: torch sees {torch.cuda.device_count()} GPU(s)",
                f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}",
            )


def train_runs(
    specs: list[RunSpec],
    *,
    device: str,
    threads: int | None,
    jobs: int | None,
    progress: bool,
    vectorize: bool = False,
) -> str:
    """Train every spec and return a one-screen summary.

    One run trains in this process with a live progress bar. Several runs train in separate
    processes (`interp.sweep.pool`), sharing the cores; a failing run is reported and does not stop the
    others. With `vectorize`, several seeds train in this process as one vectorised model.
    """
    for spec in specs:  # a mismatched or busy folder is refused before torch is imported
        check_same_config(spec.out, spec.config())
        check_unlocked(spec.out)
    from analyses.training import check_specs_memory, train_spec
    from interp.sweep.executors import LocalExecutor
    from interp.sweep.specs import run_sweep

    check_device(device)
    check_specs_memory(specs, together=vectorize)  # up front: too large is refused before any trains
    if vectorize:
        return _train_vectorized(specs, device=device, threads=threads, progress=progress)
    if len(specs) == 1:
        if threads:
            import torch

            torch.set_num_threads(threads)
        return format_run_summary(specs[0].out, train_spec(specs[0], device=device, progress=progress))
    executor = LocalExecutor(jobs=jobs, threads=threads)
    outcomes = list(run_sweep(specs, partial(train_spec, device=device), executor, progress=progress))
    table = format_table(
        ["run", "epochs", "final accuracies", "milestones"],
        [
            [str(o.item.out), *(_summary_cells(o.value) if o.ok else ["-", o.error.splitlines()[0], ""])]
            for o in sorted(outcomes, key=lambda o: str(o.item.out))
        ],
    )
    failed = sum(not o.ok for o in outcomes)
    if failed:
        raise RuntimeError(f"{failed} of {len(specs)} runs failed:\n{table}")
    return table


def _train_vectorized(specs: list[RunSpec], *, device: str, threads: int | None, progress: bool) -> str:
    from analyses.training import train_specs_vectorized

    if threads:
        import torch

        torch.set_num_threads(threads)
    summaries = train_specs_vectorized(specs, device=device, progress=progress)
    return format_table(
        ["run", "epochs", "final accuracies", "milestones"],
        [[str(spec.out), *_summary_cells(summary)] for spec, summary in zip(specs, summaries)],
    )


def _summary_cells(summary: dict[str, Any]) -> list[str]:
    final = summary["final"]
    accs = " ".join(f"{k[:-4]} {v:.3f}" for k, v in final.items() if k.count("/") == 1 and k.endswith("/acc"))
    marks = " ".join(
        f"{name}@{m['step']}{'' if m['kept'] else '(lost)'}" if m["step"] is not None else f"{name}:never"
        for name, m in summary["milestones"].items()
    )
    return [str(summary["epochs"]), accs, marks]


def format_run_summary(run_dir: Path, summary: dict[str, Any]) -> str:
    """The one-screen summary printed after training one run."""
    final = summary["final"]
    splits = sorted({k.split("/")[0] for k in final if "/" in k})
    rows = [[s, final.get(f"{s}/loss", "-"), final.get(f"{s}/acc", "-")] for s in splits]
    lines = [f"run: {run_dir}  (epochs: {summary['epochs']})", format_table(["split", "loss", "acc"], rows)]
    for name, m in summary["milestones"].items():
        when = (
            f"epoch {m['step']}, {'kept' if m['kept'] else 'not kept'} at the end"
            if m["step"] is not None
            else "never"
        )
        lines.append(f"{name} ({m['metric']} >= {m['threshold']}): {when}")
    return "\n".join(lines)


# `interp train`'s task and training options come from the config dataclasses themselves.
# They default to None: only what the user gives is passed on, so each task family keeps its
# own defaults (and rejects fields it does not have: "unknown key 'xi' for MPSPTask") and a
# preset's study settings apply where the user is silent.
# Plugins' task families too (`interp.plugins`): their fields are options of this command.
_TASK_OPTIONS = config_options(*task_families().values(), defaults=False, label=lambda cls: cls.name)
_TRAIN_OPTIONS = config_options(TrainConfig, exclude=("seed",), defaults=False)


@click.command()
@click.option("--preset", default=None, help="Model preset (e.g. mpsp-2l2h, modadd-1l, quadratic-mlp).")
@click.option(
    "--task", "task_name", default=None, help="Task family: mpsp, modadd or noise (default: the preset's)."
)
@_TASK_OPTIONS
@_TRAIN_OPTIONS
@click.option(
    "--seed", default=None, type=int, help="Seed of the model init and minibatch order [default: 0]."
)
@click.option("--seeds", default=None, help="Train several seeds, each into OUT/seed_<s>: e.g. 0-7 or 0,3,5.")
@click.option(
    "--out", type=click.Path(file_okay=False), default=None, help="Run folder to create (or resume)."
)
@click.option(
    "--resume",
    type=click.Path(file_okay=False),
    default=None,
    help="Continue the run in this folder from its LATEST checkpoint.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option(
    "--threads",
    default=None,
    type=int,
    help="CPU threads per run [default: $OMP_NUM_THREADS if set, else all cores / parallel runs].",
)
@click.option(
    "--jobs",
    default=None,
    type=int,
    help="Runs trained in parallel with --seeds [default: min(seeds, cores)].",
)
@click.option(
    "--vectorize",
    is_flag=True,
    help="With --seeds: train every seed in this process as one vectorised model (torch.func; pays on a GPU).",
)
@click.option(
    "--bf16-fallback",
    type=click.Choice(BF16_FALLBACKS),
    default="refuse",
    show_default=True,
    help="Where this CPU has no native bf16 (about 20x slower there): refuse a --bf16 run, or train "
    "it in fp32 (recorded as bf16 false). INTERP_BF16=1 runs bf16 anyway.",
)
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def train(
    preset, task_name, seed, seeds, out, resume, device, threads, jobs, vectorize, no_progress, **options
) -> None:
    """Train a model on a task into a run folder (resumable; a finished run is not retrained).

    Task and training options default to the preset's study settings, then to the task's and
    TrainConfig's own defaults (docs: Training).

    \b
    Examples:
      interp train --preset mpsp-2l2h --r 0.9 --epochs 15000 --seed 0 --out runs/x
      interp train --preset mpsp-1l1h --r 0.9 --seeds 0-7 --out runs/sweep
      interp train --preset mpsp-2l2h --seeds 0-31 --vectorize --device cuda --out runs/gpu
      interp train --resume runs/x

    --bf16 pays only on a CPU with bf16 hardware (AMX, AVX512-BF16) or a GPU; elsewhere it is
    refused unless --bf16-fallback fp32 (docs: Training).
    """
    if vectorize and not seeds:
        raise ConfigError(
            "--vectorize stacks several seeds into one model, but no --seeds were given",
            "add e.g. --seeds 0-7",
        )
    if vectorize and jobs is not None:
        raise ConfigError(
            "--jobs sets parallel processes, but --vectorize trains every seed in one",
            "drop --jobs (or --vectorize)",
        )

    specs = runs_from_options(
        preset=preset,
        task_name=task_name,
        seed=seed,
        seeds=parse_seeds(seeds) if seeds else None,
        out=out,
        resume=resume,
        task_options=given(options, _TASK_OPTIONS.names),
        train_options=given(options, _TRAIN_OPTIONS.names),
    )
    if vectorize:  # recorded in each run's config: a run resumes only with its engine
        specs = [replace(spec, train={**spec.train, "engine": "vectorized"}) for spec in specs]
    specs, fp32_note = apply_bf16_fallback(specs, options.pop("bf16_fallback"), device, resume=resume)
    for spec in specs:  # before the sweep file, which would only say "a different sweep"
        check_engine(spec.out, "vectorized" if vectorize else "separate", **TRAIN_ENGINE)
    if seeds:  # OUT holds the seeds as a sweep, so `interp report OUT` reads them as one configuration
        from interp.sweep.specs import write_sweep

        write_sweep(out, specs, {"command": "interp train", "seeds": seeds})
    if vectorize and device.startswith("cpu"):  # after every check: a refused command prints one line
        click.echo(
            "note: --vectorize pays on a GPU; on a CPU separate processes (drop --vectorize) are usually "
            "faster (benchmarks/multi_seed.py measures both)",
            err=True,
        )
    if fp32_note:
        click.echo(fp32_note, err=True)
    click.echo(
        train_runs(
            specs, device=device, threads=threads, jobs=jobs, progress=not no_progress, vectorize=vectorize
        )
    )
    check_diverged(specs)


def check_diverged(specs: list[RunSpec]) -> None:
    """Raise `TrainingDiverged` with one line per run whose DONE records a divergence."""
    from interp.errors import TrainingDiverged, divergence_line
    from interp.store.run_folder import is_done, read_done

    lines = [
        divergence_line(spec.out, done["diverged"])
        for spec in specs
        if is_done(spec.out) and "diverged" in (done := read_done(spec.out))
    ]
    if lines:
        raise TrainingDiverged("\n".join(lines))
