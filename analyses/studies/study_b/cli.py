"""`interp study-b`: study B's door on the command line (`inject`, `wlmd`, `measure`, `records`).

The options of `inject` and `wlmd` are generated from the settings dataclasses the library uses
(`interp.training.config.TrainConfig`, `tasks.NoiseInjectionTask`,
`analyses.studies.study_b.settings.WLMDSettings`), so the command line has the library's
defaults and help. Like every command they exit 2 with one line on bad input. A study's
`cli.py` belongs to the composition root (`interp.cli` lists it lazily in
`analyses.studies.STUDIES`): the one module of a study that may import `interp.cli`'s helpers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from analyses.studies.study_b.settings import PRESETS, WLMDSettings
from interp.cli.options import config_options, given, json_object, parse_seeds
from interp.config import from_dict
from interp.errors import ConfigError
from interp.training.config import TrainConfig, finetune_config
from tasks import NoiseInjectionTask

_NOISE_OPTIONS = config_options(NoiseInjectionTask, exclude=("p", "train_frac"))
# data_seed and weight_norm come from the source run (see analyses.studies.study_b.protocol.inject);
# fine-tuning is full batch on a fixed cadence. Unset options take fine-tuning's defaults
# (FINETUNE_DEFAULTS, then TrainConfig's), which differ from training from scratch.
_FINETUNE_OPTIONS = config_options(
    TrainConfig,
    exclude=("data_seed", "weight_norm", "batch_size", "seed", "eval_log_points", "checkpoint_log_points"),
    defaults=False,
)
_WLMD_OPTIONS = config_options(WLMDSettings)


@click.group("study-b")
def study_b() -> None:
    """Study B (the grokked illusion): inject noise, sample with WLMD, measure per seed, its tables."""


@study_b.command("inject")
@click.option(
    "--ckpt",
    type=click.Path(),
    required=True,
    help="A modular-addition run (its latest checkpoint) or checkpoint folder.",
)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Run folder of the fine-tuning.")
@_NOISE_OPTIONS
@_FINETUNE_OPTIONS
@click.option(
    "--keep-norm/--no-keep-norm",
    default=True,
    show_default=True,
    help="Stay on the sphere if the source run was norm-constrained.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the new embedding rows.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def inject(ckpt: str, out: str, keep_norm: bool, seed: int, no_progress: bool, **options: Any) -> None:
    """Study B: extend a model's vocabulary and fine-tune it on train + noise; track forgetting.

    Fine-tuning options left unset take fine-tuning's defaults: --epochs 20000 (the step cap),
    --lr 0.001, --weight-decay 0, --target-acc 0.998, --eval-every 10, --checkpoint-every 1000.
    """
    from analyses.studies.study_b.protocol import inject as run_injection

    config = finetune_config(**given(options, _FINETUNE_OPTIONS.names))
    noise = given(options, _NOISE_OPTIONS.names)
    summary = run_injection(
        out,
        ckpt,
        noise.pop("noise"),
        **noise,
        config=config,
        keep_norm=keep_norm,
        seed=seed,
        progress=not no_progress,
    )
    accuracies = ", ".join(
        f"{key} {value:.3f}" for key, value in summary["final"].items() if key.endswith("/acc")
    )
    click.echo(
        f"reached {config.target_acc}: {summary['reached']} after {summary['steps']} steps; final: {accuracies}"
    )


@study_b.command("wlmd")
@click.option(
    "--ckpt",
    type=click.Path(),
    required=True,
    help="The AdamW (goldilocks) run or checkpoint the walkers start from.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    required=True,
    help="Folder: OUT/entropy (the walk) and OUT/samples; both resume when the same command runs again.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@_WLMD_OPTIONS
def wlmd(ckpt: str, out: str, device: str, **options: Any) -> None:
    """Study B: Wang-Landau molecular dynamics on the weight sphere; save equilibrium samples.

    \b
    Examples:
      interp study-b wlmd --ckpt runs/b-adamw --out runs/b-wlmd --steps 200000 --production-steps 50000
      interp study-b wlmd --ckpt runs/b-adamw --out runs/b-wlmd --steps 2000 --production-steps 500 --walkers 1 \\
          --x-below 0.75 --x-above 0.25 --y-low 9.5 --bins 4 7 --max-samples 4    # the CPU-scale protocol
      interp study-b wlmd --ckpt runs/b-adamw --out runs/b-wlmd-gpu --walkers 8 --engine vectorized --device cuda
    """
    settings = from_dict(WLMDSettings, given(options, _WLMD_OPTIONS.names), where="the wlmd options")
    from interp.cli.train import check_device

    check_device(device)
    from analyses.studies.study_b.protocol import wlmd_sample

    folder, samples = wlmd_sample(out, ckpt, settings, device=device)
    click.echo(f"{len(samples)} samples in the target window under {folder / 'samples'}")


@study_b.command("measure")
@click.argument("out", type=click.Path(file_okay=False))
@click.option(
    "--seeds",
    default="0-2",
    show_default=True,
    help="Seeds: e.g. 0-2 or 0,3,5. The tables, figures and --export cover these seeds only.",
)
@click.option(
    "--settings",
    "settings_json",
    default="{}",
    show_default=True,
    help='JSON overrides of StudyBSettings, e.g. \'{"epochs": 2000, "wlmd": {"dt": 3e-4}}\'.',
)
@click.option(
    "--table-only", is_flag=True, help="Only rebuild the tables and figures from the finished runs."
)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads.")
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default="cpu",
    show_default=True,
    help="Base settings: the first CPU-scale protocol; protocol 2 (long walks, unconstrained "
    "injections); protocol 2 with three walkers from their own AdamW models (a shorter road that "
    "failed on seed 0, kept so its records rebuild); protocol 3 (protocol 2 with the classic "
    "ln f schedule from 10, linear grid edges and a target of 4 halvings); or protocol 4 (protocol 3 "
    "with twice its step budget, continuing its walks).",
)
@click.option(
    "--export",
    "export_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write the compact records (no weights) here, e.g. results/study-b/protocol-2; the "
    "records of other seeds already there are kept, so each seed is exported once, when it finishes "
    "(a seed with no finished injection yet is left out, with a note of where it stands).",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option(
    "--vectorize",
    is_flag=True,
    help="Move the walkers with the vectorised engine (settings wlmd.engine = vectorized; for a GPU).",
)
@click.option(
    "--runs-only",
    is_flag=True,
    help="Only run the seeds; skip the tables, figures and export (seeds running side by side, "
    "with one --table-only command after them: scripts/gpu/study_b.sh).",
)
def study_b_measure(
    out: str,
    seeds: str,
    settings_json: str,
    table_only: bool,
    threads: int,
    preset: str,
    export_dir: str | None,
    device: str,
    vectorize: bool,
    runs_only: bool,
) -> None:
    """Goldilocks AdamW -> WLMD sample -> injection of each noise type, per seed; then the tables.

    \b
    Examples:
      interp study-b measure runs/study-b-2 --seeds 0-2 --preset protocol-2 --export results/study-b/protocol-2
      interp study-b measure runs/b-gpu --seeds 3 --preset protocol-2 --device cuda --vectorize --runs-only
    """
    from analyses.studies.study_b.settings import settings_with

    overrides = json_object(settings_json, "--settings")
    if vectorize and isinstance(overrides.get("wlmd", {}), dict):  # a non-object is refused below
        overrides["wlmd"] = {**overrides.get("wlmd", {}), "engine": "vectorized"}
    settings = settings_with(overrides, PRESETS[preset])
    seed_list = parse_seeds(seeds)
    if table_only and runs_only:
        raise ConfigError("--table-only and --runs-only exclude each other", "give one of them")
    if table_only:
        _check_measured(Path(out), seed_list)
    from interp.cli.train import check_device

    check_device(device)
    import torch

    from analyses.studies.study_b import measure as measured
    from analyses.studies.study_b import records, tables

    torch.set_num_threads(threads)
    if not table_only:
        from interp.training.memory import keep_freed_memory

        keep_freed_memory()  # long full-batch loops reuse the same buffers (benchmarks/wlmd_step.py)
        measured.measure(out, seed_list, settings, device)
    if runs_only:
        click.echo(f"seeds {seeds} measured in {out}")
        return
    # The tables, figures and records cover the seeds named: one still training beside them
    # (another command's) would show as an empty row.
    click.echo(tables.write_tables(out, seed_list).read_text())
    click.echo(f"figures: {len(records.write_figures(out, seed_list))} HTML files in {out}/seed_*/")
    if export_dir is not None:  # refused in one line when no seed named has finished
        click.echo(f"records: {records.export_results(out, export_dir, seed_list)}")
    for seed, where in measured.unfinished(out, seed_list).items():
        left_out = "; left out of the records" if export_dir is not None else ""
        click.echo(f"seed {seed} is not measured yet ({where}): no retention row{left_out}", err=True)


def _check_measured(out: Path, seeds: list[int]) -> None:
    """Refuse --table-only on a folder that holds none of `seeds` (before torch is imported)."""
    from interp.sweep.specs import seed_folders

    measured = list(seed_folders(out))
    if not set(measured) & set(seeds):
        found = ", ".join(map(str, measured)) if measured else "none"
        raise ConfigError(
            f"--table-only: {out} holds no measured seed among {', '.join(map(str, seeds))} "
            f"(seed folders there: {found})",
            "name a folder that interp study-b measure ran into, or seeds it holds",
        )


@study_b.command("records")
@click.argument("records", type=click.Path(file_okay=False, exists=True))
@click.option(
    "--figures",
    type=click.Path(file_okay=False),
    default=None,
    help="Also draw the walks and the forgetting curves as HTML pages into this folder.",
)
def study_b_records(records: str, figures: str | None) -> None:
    """Print the retention and WLMD tables (markdown) from exported records (no weights needed).

    \b
    Example:
      interp study-b records results/study-b/protocol-2 --figures figures/study-b
    """
    from pathlib import Path

    runs = Path(records) / "study_b_runs.csv"
    if not runs.exists() or len(runs.read_text().strip().splitlines()) < 2:  # before the heavy imports
        raise ConfigError(
            f"{records} holds no finished injection run (no study_b_runs.csv, or one without rows)",
            "give a folder written by interp study-b measure --export from a finished seed",
        )
    from analyses.studies.study_b.records import write_record_figures
    from analyses.studies.study_b.tables import markdown_tables

    click.echo(markdown_tables(records))
    if figures is not None:
        written = write_record_figures(records, figures)
        click.echo(f"figures: {len(written)} HTML files in {figures}/")
