"""The `interp` command line: the composition root of the toolkit.

Thin by design: parse, load, call the same function a notebook calls, save, print a short
table. Heavy imports (torch, TransformerLens) happen inside commands so that `interp --help`
starts in well under a second. This is the only module of `interp` that may import `models`,
`tasks` and `analyses`.

Exit codes: 0 ok, 1 runtime failure, 2 bad usage or bad input, 130 on Ctrl-C. No traceback
unless `--debug`.
"""

from __future__ import annotations

import sys
from pathlib import Path
import traceback

import click

from interp.cli.analyses import AnalysisGroup
from interp.errors import ConfigError, InterpError, TrainingInterrupted

EXIT_RUNTIME, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130


@click.group(cls=AnalysisGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="interp")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Train, checkpoint and dissect small models on synthetic tasks."""
    ctx.obj = {"debug": debug}


@cli.command()
@click.option("--label", default="sum-mod2", show_default=True, help="True rule: sum-mod2 or sum-mod3.")
@click.option("--shortcut", default="max", show_default=True, help="Spurious feature: max or first.")
@click.option("--r", "r", default=0.9, show_default=True, type=float, help="Spurious ratio of the train split, in [0, 1].")
@click.option("--preset", default="mpsp-2l2h", show_default=True, help="Model preset.")
@click.option("--data-seed", default=0, show_default=True, type=int, help="Seed of the data splits.")
def describe(label: str, shortcut: str, r: float, preset: str, data_seed: int) -> None:
    """Build a study-A dataset and model and print a summary of both (sizes, ratios, hooks)."""
    from interp.text import summarize_task_and_model
    from models import build_model, preset_config
    from tasks import MPSPTask

    task = MPSPTask(label=label, shortcut=shortcut, r=r)
    model = build_model(preset_config(preset, task))
    click.echo(summarize_task_and_model(task, task.splits(data_seed), model, preset=preset))


_EXECUTORS = click.Choice(["local", "slurm", "submitit-local"])


@cli.command()
@click.option("--grid", default="demo", show_default=True, help="A named grid (demo, study-a, study-c) or a grid .json file.")
@click.option("--set", "axes", multiple=True, help="Sweep a field: FIELD=V1,V2 (task or training field; repeatable).")
@click.option("--seeds", type=int, default=None, help="Seeds per configuration [default: the grid's].")
@click.option("--epochs", type=int, default=None, help="Epochs per run [default: the grid's].")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Sweep folder (created, or resumed).")
@click.option("--executor", type=_EXECUTORS, default="local", show_default=True, help="Where runs execute.")
@click.option("--jobs", type=int, default=None, help="Local runs in parallel [default: one per core].")
@click.option("--threads", type=int, default=None, help="torch threads per run.")
@click.option("--partition", default=None, help="Slurm partition.")
@click.option("--timeout-min", type=int, default=240, show_default=True, help="Slurm time limit per run.")
@click.option("--report/--no-report", default=True, show_default=True, help="Write the HTML report at the end.")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def sweep(grid, axes, seeds, epochs, out, executor, jobs, threads, partition, timeout_min, report, no_progress) -> None:
    """Train a grid of runs (finished runs are skipped, interrupted ones resume), then report.

    \b
    Examples:
      interp sweep --grid demo --out runs/demo
      interp sweep --grid study-a --set r=0.5,0.9 --seeds 10 --out runs/a --executor slurm --partition gpu
    """
    from interp.cli.sweep import load_grid, make_executor, run_grid, write_sweep_report

    out_dir = Path(out)
    the_grid = load_grid(grid, seeds=seeds, epochs=epochs, axes=list(axes))
    runner = make_executor(executor, jobs=jobs, threads=threads, folder=out_dir, partition=partition, timeout_min=timeout_min)
    finished, failures = run_grid(the_grid, out_dir, runner, progress=not no_progress)
    click.echo(f"{finished} runs finished in {out_dir}")
    if report:
        click.echo(f"report: {write_sweep_report(out_dir, evolution=False, progress=not no_progress)}")
    if failures:
        raise RuntimeError(f"{len(failures)} runs failed (the others finished):\n" + "\n".join(failures))


@cli.command()
@click.argument("sweep_dir", type=click.Path(file_okay=False))
@click.option("--evolution/--no-evolution", default=False, show_default=True,
              help="Per-run circuit-evolution figures (study A; computes fingerprints and gradients per checkpoint).")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def report(sweep_dir: str, evolution: bool, no_progress: bool) -> None:
    """Write SWEEP_DIR/report.html: rates per configuration with Wilson intervals, every run's figure."""
    from interp.cli.sweep import write_sweep_report

    click.echo(f"report: {write_sweep_report(Path(sweep_dir), evolution=evolution, progress=not no_progress)}")


@cli.command()
@click.option("--run", "run_dir", type=click.Path(file_okay=False), required=True, help="A run folder.")
@click.option("--analysis", default=None, help="A registered analysis to evolve [default: study A's circuit figure].")
@click.option("--param", "params", multiple=True,
              help="An analysis parameter, NAME=VALUE (repeatable), e.g. frequencies=14,35.")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Output folder [default: RUN/evolution].")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def evolve(
    run_dir: str, analysis: str | None, params: tuple[str, ...], out: str | None, no_progress: bool
) -> None:
    """Run an analysis over every checkpoint of a run (cached per step), or draw study A's
    circuit-evolution figure and checkpoint explorer."""
    from analyses import get_analysis, load_subject
    from analyses.evolution import evolve as evolve_run
    from interp.cli.analyses import params_from_strings

    if params and analysis is None:
        raise ConfigError("--param needs --analysis", "name the analysis whose parameters these are")

    folder = Path(out) if out else Path(run_dir) / "evolution"
    folder.mkdir(parents=True, exist_ok=True)
    if analysis is None:
        from analyses.studies.study_a import attention_explorer, circuit_evolution_figure

        circuit_evolution_figure(run_dir, progress=not no_progress).write_html(folder / "circuit_evolution.html", include_plotlyjs="directory")
        attention_explorer(run_dir).write_html(folder / "explorer.html", include_plotlyjs="directory")
        click.echo(f"wrote {folder / 'circuit_evolution.html'} and {folder / 'explorer.html'}")
        return
    entry = get_analysis(analysis)
    chosen = params_from_strings(entry, params)
    evolution = evolve_run(run_dir, entry, chosen, load_subject, progress=not no_progress)
    frame = evolution.to_frame()
    frame.to_csv(folder / f"{analysis}.csv", index=False)
    click.echo(f"{analysis} over {len(evolution.steps)} checkpoints -> {folder / f'{analysis}.csv'}")


@cli.command()
@click.option("--ckpt", type=click.Path(), required=True, help="A modular-addition run (its latest checkpoint) or checkpoint folder.")
@click.option("--noise", type=click.Choice(["random", "square", "sum"]), default="random", show_default=True,
              help="Noise labels: random, x^2 + y mod k (square) or x + y mod k (sum).")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Run folder of the fine-tuning.")
@click.option("--k", type=int, default=37, show_default=True, help="New number tokens added to the vocabulary.")
@click.option("--new-classes/--no-new-classes", default=False, show_default=True, help="Noise labels as new output classes.")
@click.option("--lr", type=float, default=1e-3, show_default=True, help="AdamW learning rate.")
@click.option("--target-acc", type=float, default=0.998, show_default=True, help="Stop once combined train accuracy exceeds this.")
@click.option("--max-steps", type=int, default=20000, show_default=True, help="Step cap (reported, not an error, if reached).")
@click.option("--keep-norm/--no-keep-norm", default=True, show_default=True, help="Stay on the sphere if the source run was norm-constrained.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the new embedding rows.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def inject(ckpt, noise, out, k, new_classes, lr, target_acc, max_steps, keep_norm, seed, no_progress) -> None:
    """Study B: extend a model's vocabulary and fine-tune it on train + noise; track forgetting."""
    from analyses.studies.study_b import inject as run_injection
    from interp.training.config import FinetuneConfig

    config = FinetuneConfig(lr=lr, target_acc=target_acc, max_steps=max_steps)
    summary = run_injection(out, ckpt, noise, k=k, new_classes=new_classes, config=config, keep_norm=keep_norm,
                            seed=seed, progress=not no_progress)
    click.echo(f"reached {target_acc}: {summary['reached']} after {summary['steps']} steps; "
               f"final: " + ", ".join(f"{key} {value:.3f}" for key, value in summary["final"].items() if key.endswith("/acc")))


@cli.command()
@click.option("--ckpt", type=click.Path(), required=True, help="The AdamW (goldilocks) run or checkpoint the walkers start from.")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder: OUT/entropy (resumable) and OUT/samples.")
@click.option("--steps", type=int, default=20000, show_default=True, help="Entropy-phase steps.")
@click.option("--production-steps", type=int, default=5000, show_default=True, help="Steps with S frozen, saving in-window snapshots.")
@click.option("--walkers", type=int, default=2, show_default=True, help="Walkers sharing S.")
@click.option("--dt", type=float, default=1e-4, show_default=True, help="Verlet time step (parameter moves ~dt*sqrt(P) per step).")
@click.option("--gamma", type=float, default=0.1, show_default=True, help="Thermostat friction per step.")
@click.option("--kt", type=float, default=1.0, show_default=True, help="Thermostat temperature.")
@click.option("--k", "sharpness", type=float, default=6.0, show_default=True, help="Sharpness k of the smooth accuracy CV.")
@click.option("--share-every", type=int, default=100, show_default=True, help="Average S across walkers every N steps.")
@click.option("--every", type=int, default=50, show_default=True, help="Check for an in-window snapshot every N production steps.")
@click.option("--max-samples", type=int, default=10, show_default=True, help="Stop production after this many snapshots.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of velocities and thermostat noise.")
@click.option("--x-span", type=(float, float), default=(8.0, 4.0), show_default=True,
              help="Grid of x = ln(train loss) from x0 - BELOW to x0 + ABOVE (x0: the start's). 0.75 0.25: the CPU protocol.")
@click.option("--y-low", type=float, default=0.0, show_default=True, help="Lower grid edge of the smooth accuracy y (top 10.2).")
@click.option("--bins", type=(int, int), default=(24, 34), show_default=True, help="Grid bins along x and y.")
@click.option("--window-x", type=float, default=0.25, show_default=True, help="Keep snapshots with |x - x0| <= this ...")
@click.option("--window-y", type=float, default=9.9, show_default=True, help="... and y >= min(y0, this).")
def wlmd(ckpt, out, steps, production_steps, walkers, dt, gamma, kt, sharpness, share_every, every, max_samples, seed,
         x_span, y_low, bins, window_x, window_y) -> None:
    """Study B: Wang-Landau molecular dynamics on the weight sphere; save equilibrium samples.

    \b
    Examples:
      interp wlmd --ckpt runs/b-adamw --out runs/b-wlmd --steps 200000 --production-steps 50000
      interp wlmd --ckpt runs/b-adamw --out runs/b-wlmd --steps 2000 --production-steps 500 --walkers 1 \\
          --dt 2e-4 --x-span 0.75 0.25 --y-low 9.5 --bins 4 7      # the CPU-scale protocol
    """
    from analyses.studies.study_b import Region, wlmd_sample

    region = Region(x_span[0], x_span[1], y_low, bins, window_x, window_y)
    folder, samples = wlmd_sample(out, ckpt, steps=steps, production_steps=production_steps, n_walkers=walkers, dt=dt,
                                  gamma=gamma, kT=kt, k=sharpness, share_every=share_every, every=every,
                                  max_samples=max_samples, seed=seed, region=region)
    click.echo(f"{len(samples)} samples in the target window under {folder / 'samples'}")


@cli.command()
@click.option("--out", type=click.Path(file_okay=False), default="runs/demo", show_default=True, help="Sweep folder.")
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def demo(out: str, no_progress: bool) -> None:
    """The main job on built-in defaults: a small study-A sweep (1 vs 2 layers, r = 0.5 vs 0.9),
    its circuit evolution, and an HTML report. About 10 minutes on 2 CPU cores."""
    import time

    from interp.cli.sweep import load_grid, make_executor, run_grid, write_sweep_report

    start = time.perf_counter()
    out_dir = Path(out)
    grid = load_grid("demo", seeds=None, epochs=None, axes=[])
    executor = make_executor("local", jobs=None, threads=None, folder=out_dir, partition=None, timeout_min=0)
    finished, failures = run_grid(grid, out_dir, executor, progress=not no_progress)
    if failures:
        raise RuntimeError("demo runs failed:\n" + "\n".join(failures))
    path = write_sweep_report(out_dir, evolution=True, progress=not no_progress)
    click.echo(f"{finished} runs in {out_dir}; report: {path}  ({time.perf_counter() - start:.0f} s)")


# Task options of `interp train`: (flag, task config field, type, help). Only the options the
# user gives are passed on, so each task family keeps its own defaults and rejects fields it
# does not have ("unknown key 'xi' for MPSPTask").
_TASK_OPTIONS = [
    ("--label", "label", str, "MPSP true rule: sum-mod2 or sum-mod3."),
    ("--shortcut", "shortcut", str, "MPSP spurious feature: max or first."),
    ("--r", "r", float, "MPSP spurious ratio of the train split, in [0, 1]."),
    ("--n", "n", int, "MPSP sequence length."),
    ("--vocab", "vocab", int, "MPSP integers are drawn from 0..vocab-1."),
    ("--n-train", "n_train", int, "MPSP train split size."),
    ("--n-val", "n_val", int, "MPSP val split size."),
    ("--n-adv", "n_adv", int, "MPSP adv split size."),
    ("--p", "p", int, "Modular addition modulus."),
    ("--train-frac", "train_frac", float, "Modular addition train fraction."),
    ("--xi", "xi", float, "Modular addition label-noise fraction."),
    ("--k", "k", int, "Noise injection: number of new tokens."),
    ("--noise", "noise", str, "Noise injection type: random, square or sum."),
]
_TRAIN_OPTIONS = [
    ("--epochs", "epochs", int, "Passes over the train split (full batch: steps)."),
    ("--lr", "lr", float, "AdamW learning rate."),
    ("--weight-decay", "weight_decay", float, "AdamW weight decay."),
    ("--batch-size", "batch_size", int, "Minibatch size (default: full batch)."),
    ("--loss", "loss", str, "cross_entropy or mse (against one-hot targets)."),
    ("--weight-norm", "weight_norm", float, "Project all weights onto ||w|| = this after every step."),
    ("--data-seed", "data_seed", int, "Seed of the data splits."),
    ("--eval-every", "eval_every", int, "Evaluate every N epochs (plus log-spaced epochs)."),
    ("--checkpoint-every", "checkpoint_every", int, "Checkpoint every N epochs (plus log-spaced epochs)."),
]


def _add_options(options: list[tuple[str, str, type, str]]):
    def decorate(func):
        for flag, field, kind, help_text in reversed(options):
            func = click.option(flag, field, type=kind, default=None, help=help_text)(func)
        return func

    return decorate


def _parse_seeds(text: str) -> list[int]:
    """Parse ``"0-7"``, ``"0,3,5"`` or ``"0-3,8"`` into a list of seeds."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    except ValueError:
        raise ConfigError(f"--seeds {text!r} is not a seed list", "use e.g. 0-7 or 0,3,5") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r} is empty or repeats a seed", "use e.g. 0-7 or 0,3,5")
    return seeds


@cli.command()
@click.option("--preset", default=None, help="Model preset (e.g. mpsp-2l2h, modadd-1l, quadratic-mlp).")
@click.option("--task", "task_name", default=None, help="Task family: mpsp, modadd or noise (default: the preset's).")
@_add_options(_TASK_OPTIONS)
@_add_options(_TRAIN_OPTIONS)
@click.option("--seed", default=None, type=int, help="Seed of the model init and minibatch order [default: 0].")
@click.option("--seeds", default=None, help="Train several seeds, each into OUT/seed_<s>: e.g. 0-7 or 0,3,5.")
@click.option("--bf16", is_flag=True, default=None, help="Train under bfloat16 autocast.")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Run folder to create (or resume).")
@click.option("--resume", type=click.Path(file_okay=False), default=None, help="Continue the run in this folder from its LATEST checkpoint.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:1, ...")
@click.option("--threads", default=None, type=int, help="CPU threads per run [default: all cores / parallel runs].")
@click.option("--jobs", default=None, type=int, help="Runs trained in parallel with --seeds [default: min(seeds, cores)].")
@click.option("--vectorize", is_flag=True,
              help="With --seeds: train every seed in this process as one vectorised model (torch.func; pays on a GPU).")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def train(preset, task_name, seed, seeds, bf16, out, resume, device, threads, jobs, vectorize, no_progress, **options) -> None:
    """Train a model on a task into a run folder (resumable; a finished run is not retrained).

    \b
    Examples:
      interp train --preset mpsp-2l2h --r 0.9 --epochs 15000 --seed 0 --out runs/x
      interp train --preset mpsp-1l1h --r 0.9 --seeds 0-7 --out runs/sweep
      interp train --preset mpsp-2l2h --seeds 0-31 --vectorize --device cuda --out runs/gpu
      interp train --resume runs/x
    """
    from interp.cli.train import plan_runs, train_runs

    if vectorize and not seeds:
        raise ConfigError("--vectorize stacks several seeds into one model, but no --seeds were given",
                          "add e.g. --seeds 0-7")
    if vectorize and device.startswith("cpu"):
        click.echo("note: --vectorize pays on a GPU; on a CPU separate processes (drop --vectorize) are usually "
                   "faster (benchmarks/multi_seed.py measures both)", err=True)

    specs = plan_runs(
        preset=preset, task_name=task_name, seed=seed, seeds=_parse_seeds(seeds) if seeds else None,
        bf16=bf16, out=out, resume=resume,
        task_options={f: options[f] for _, f, _, _ in _TASK_OPTIONS if options[f] is not None},
        train_options={f: options[f] for _, f, _, _ in _TRAIN_OPTIONS if options[f] is not None},
    )
    click.echo(train_runs(specs, device=device, threads=threads, jobs=jobs, progress=not no_progress, vectorize=vectorize))


@cli.command(name="import")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--task", "task_name", required=True,
              help="Task family the model was trained on: mpsp, modadd or noise.")
@_add_options(_TASK_OPTIONS)
@click.option("--data-seed", default=0, show_default=True, type=int,
              help="Seed of the task's splits (their digests go into the run).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TransformerLens config.json [default: in the torch file, or beside a .safetensors].")
@click.option("--loss", type=click.Choice(["cross_entropy", "mse"]), default="cross_entropy",
              show_default=True, help="Loss the analyses report (the one the model was trained with).")
@click.option("--step", default=0, show_default=True, type=int,
              help="Training step to file the checkpoint under.")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Run folder to create.")
def import_(source, task_name, data_seed, config_path, loss, step, out, **options) -> None:
    """Bring a TransformerLens-convention checkpoint (a .pt/.pth holding a state dict and a config dict, or
    .safetensors beside a config.json) into a run folder, for the task you name; files that need pickled
    code are refused.

    \b
    Examples:
      interp import grokking.pth --task modadd --p 113 --out runs/grokking
      interp import model.safetensors --task mpsp --r 0.9 --out runs/tl-mpsp
    """
    from interp.cli.imports import import_checkpoint

    task = {"name": task_name, **{f: options[f] for _, f, _, _ in _TASK_OPTIONS if options[f] is not None}}
    summary = import_checkpoint(Path(source), task, Path(out), data_seed=data_seed, step=step, loss=loss,
                                config_path=Path(config_path) if config_path else None)
    accuracy = ", ".join(f"{k} {v:.3f}" for k, v in summary["final"].items() if k.endswith("/acc"))
    click.echo(f"imported {source} into {out} (step {summary['step']}); {accuracy}")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI and map errors to exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_USAGE)
    except InterpError as err:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {err} [see docs/errors.md#{err.anchor}]", err=True)
        sys.exit(EXIT_USAGE)
    except TrainingInterrupted as err:
        click.echo(f"interrupted: {err}; run the same command (or interp train --resume) to continue", err=True)
        sys.exit(128 + err.signum)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as err:  # noqa: BLE001 - the CLI's last line of defence
        if debug:
            traceback.print_exc()
        click.echo(f"error: {type(err).__name__}: {err} (run with --debug for the traceback)", err=True)
        sys.exit(EXIT_RUNTIME)
    sys.exit(0)


if __name__ == "__main__":
    main()
