"""Time `interp evolve` over 100 checkpoints of a study-scale 2L2H run, cold (issue 13: < 1 minute in all).

Run: `.venv/bin/python benchmarks/evolve.py --folder /tmp/evolve-bench [--threads 2]`.

The run folder (built once, then reused from `--folder`) has study A's shape: `mpsp-2l2h`,
16,384 training examples, 2,048 adv, the study's config.json, and 100 checkpoints with weights
and optimizer state, as training writes them. To build it in seconds rather than training
15,000 epochs, the model takes one full-batch AdamW step (the study's settings) between
checkpoints: the weights are those of a briefly trained model, which costs an analysis
the same as a late one (same shapes, same work).

Then each analysis runs as a user runs it, `python -m interp evolve ...` in a fresh process
(imports included), with no cached results (the `analyses/` folder is deleted first): the
fingerprint and patch on `adv`, grads on `train`. Printed: seconds per command, per
checkpoint, and the total against the target. The OS page cache is not dropped (the files
were just written or read), so "cold" means no cached analysis results and a new process.

`--one-command` times them as one `interp evolve` with three `--analysis` (imports and the run
once); `--one-process` times the same three series as a notebook computes them: one fresh process
that imports the toolkit once, opens the run once (`RunHandle`) and calls
`analyses.evolution.evolve` three times. The imports (torch, TransformerLens: seconds each
time) are then paid once instead of three times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_S = 60.0
CHECKPOINTS = 100
COMMANDS = {
    "fingerprint (adv)": ["--analysis", "fingerprint", "--param", "split=adv"],
    "patch (adv)": ["--analysis", "patch", "--param", "split=adv"],
    "grads (train)": ["--analysis", "grads", "--param", "split=train"],
}


def build_run(run_dir: Path) -> None:
    """Write the study-shaped run folder with `CHECKPOINTS` checkpoints (skipped if already there)."""
    import torch

    from analyses.recipes import plan_runs
    from interp.config import from_dict
    from interp.metrics import per_example_loss
    from interp.splits import split_digests
    from interp.store import list_checkpoints
    from interp.store.session import open_run
    from interp.training import TrainConfig
    from interp.training.loop import training_forward
    from models import build_model
    from tasks import task_from_dict

    if run_dir.is_dir() and len(list_checkpoints(run_dir)) >= CHECKPOINTS:
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    spec = plan_runs("mpsp-2l2h", {"r": 0.9}, {"seed": 0}, None, run_dir)[0]
    config = from_dict(TrainConfig, spec.train)
    task = task_from_dict(spec.task)
    model = build_model(spec.model, seed=config.seed)
    splits = task.splits(config.data_seed)
    train = splits["train"]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )
    forward = training_forward(model)
    with open_run(run_dir, spec.config(), split_digests(splits)) as run:
        for step in range(CHECKPOINTS):
            loss = per_example_loss(forward(train.tokens), train.labels, config.loss).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.log({"step": step, "train/loss": loss.item()})
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            run.save(step, state, {"optimizer": optimizer.state_dict()})


def first_checkpoints(run_dir: Path, count: int) -> Path:
    """A copy of `run_dir` holding only its first `count` checkpoints (for a quick, scaled estimate)."""
    from interp.store import checkpoint_name

    subset = run_dir.with_name(f"{run_dir.name}-first{count}")
    if not subset.is_dir():
        (subset / "checkpoints").mkdir(parents=True)
        for name in ("config.json", "metrics.jsonl"):
            shutil.copy(run_dir / name, subset / name)
        for step in range(count):
            shutil.copytree(
                run_dir / "checkpoints" / checkpoint_name(step),
                subset / "checkpoints" / checkpoint_name(step),
            )
        (subset / "checkpoints" / "LATEST").write_text(checkpoint_name(count - 1) + "\n")
    return subset


def time_evolve(run_dir: Path, args: list[str], threads: int) -> float:
    """Wall seconds of `python -m interp evolve --run RUN ARGS` in a fresh process, no cached results."""
    shutil.rmtree(run_dir / "analyses", ignore_errors=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": str(threads),
    }
    command = [sys.executable, "-m", "interp", "evolve", "--run", str(run_dir), *args, "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return seconds


# The same three series as one command: --param split=adv for all, grads' own split=train.
ONE_COMMAND = [
    *("--analysis", "fingerprint", "--analysis", "patch", "--analysis", "grads"),
    *("--param", "split=adv", "--param", "grads.split=train"),
]

ONE_PROCESS = """
import sys, time
start = time.perf_counter()
from analyses.evolution import evolve
from interp.store.handle import RunHandle
run = RunHandle.open(sys.argv[1])
imported = time.perf_counter()
print(f"imports and run {imported - start:.1f}")
for name, split in (("fingerprint", "adv"), ("patch", "adv"), ("grads", "train")):
    t = time.perf_counter()
    evolve(run, name, split=split, progress=False)
    print(f"{name} ({split}) {time.perf_counter() - t:.1f}")
"""


def time_one_process(run_dir: Path, threads: int) -> tuple[float, str]:
    """Wall seconds of the three series in one fresh process (no cached results), and its log."""
    shutil.rmtree(run_dir / "analyses", ignore_errors=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": str(threads),
    }
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", ONE_PROCESS, str(run_dir)], capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the one-process series failed:\n{done.stderr}")
    return seconds, done.stdout.strip().replace("\n", "; ")


def main() -> None:
    """Build (or reuse) the run, time each evolve command cold, print the table and verdict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="Where the benchmark run is kept.")
    parser.add_argument("--threads", type=int, default=2, help="OMP threads of the evolve processes.")
    parser.add_argument("--only", choices=sorted(COMMANDS), default=None, help="Time one command only.")
    parser.add_argument(
        "--jobs", type=int, default=1, help="`interp evolve --jobs`: worker processes sharing the threads."
    )
    parser.add_argument(
        "--first",
        type=int,
        default=None,
        help="Evolve over the first N (>= 2) and the first 1 checkpoints and estimate 100 (labelled as such).",
    )
    parser.add_argument(
        "--one-command",
        action="store_true",
        help="Time the three series as one `interp evolve` with three --analysis (one import, one run).",
    )
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="Time the three series in one process, as a notebook runs them (imports and run opened once).",
    )
    args = parser.parse_args()
    run_dir = args.folder / "mpsp-2l2h-100ckpt"
    start = time.perf_counter()
    build_run(run_dir)
    print(f"run folder {run_dir} ready ({time.perf_counter() - start:.1f} s; reused if it existed)")
    if args.one_command or args.one_process:
        count = args.first or CHECKPOINTS
        folder = first_checkpoints(run_dir, count) if args.first else run_dir
        if args.one_command:
            command = [*ONE_COMMAND, "--jobs", str(args.jobs)]
            seconds, label = time_evolve(folder, command, args.threads), f"interp evolve {' '.join(command)}"
        else:
            seconds, label = time_one_process(folder, args.threads)
        verdict = (
            ("met" if seconds < TARGET_S else "NOT met") if count == CHECKPOINTS else "not measured (--first)"
        )
        kind = "one command" if args.one_command else "one process"
        print(
            f"{kind} ({label}): {seconds:.1f} s over {count} checkpoints; "
            f"target < {TARGET_S:g} s over {CHECKPOINTS}: {verdict}"
        )
        return
    one = first_checkpoints(run_dir, 1) if args.first else None
    if args.first:
        run_dir = first_checkpoints(run_dir, args.first)
    total = 0.0
    for name, command in COMMANDS.items():
        if args.only not in (None, name):
            continue
        seconds = time_evolve(run_dir, command, args.threads)
        if one is None:
            total += seconds
            print(f"{name:18s} {seconds:6.1f} s  ({1e3 * seconds / CHECKPOINTS:6.1f} ms per checkpoint)")
            continue
        # Estimate: the start-up (a 1-checkpoint evolve) plus the marginal cost of 99 more.
        start = time_evolve(one, command, args.threads)
        marginal = (seconds - start) / (args.first - 1)
        estimate = start + marginal * (CHECKPOINTS - 1)
        total += estimate
        print(
            f"{name:18s} measured {seconds:.1f} s over {args.first}, {start:.1f} s over 1: "
            f"{1e3 * marginal:.0f} ms per further checkpoint; estimated {estimate:.1f} s over {CHECKPOINTS}"
        )
    verdict = "met" if total < TARGET_S else "NOT met"
    print(
        f"total {total:.1f} s over {CHECKPOINTS} checkpoints x {len(COMMANDS)} analyses; "
        f"target < {TARGET_S:g} s: {verdict}"
    )


if __name__ == "__main__":
    main()
