"""Study A's three preregistered dissection series: choose, retrain densely, check, export.

Usage::

    python scripts/long_runs/study_a_series.py choose [RESULTS]
    python scripts/long_runs/study_a_series.py train RECORD OUT [--every 25]
    python scripts/long_runs/study_a_series.py check RECORD OUT
    python scripts/long_runs/study_a_series.py export RECORD OUT DEST

``choose`` prints the run each series' rule picks from the committed records (RESULTS defaults
to results/study-a; `analyses.studies.study_a.series_choice`), among the runs this machine
trained: only those can be retrained bit for bit here. ``train`` retrains the committed
run RECORD (its config.json: same seeds, data and optimiser) into OUT with a checkpoint every
``--every`` epochs (resumable: run it again). ``check`` compares OUT's metrics with RECORD's at
every evaluation: equal, or the largest difference and both runs' milestones. ``export`` copies
OUT's record and the weights of at most 40 checkpoints (every one across phase 2, log-spaced
elsewhere) into DEST, e.g. results/study-a/series/wd-headline-mpsp-2l2h-r0.9. One thread, as
the grids ran.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    choose = commands.add_parser("choose", help="the run each series' rule picks")
    choose.add_argument("results", type=Path, nargs="?", default=ROOT / "results" / "study-a")
    for name in ("train", "check", "export"):
        command = commands.add_parser(name)
        command.add_argument("record", type=Path, help="the committed run record (results/study-a/...)")
        command.add_argument("out", type=Path, help="the retrained run folder (outside git)")
        if name == "train":
            command.add_argument("--every", type=int, default=25, help="a checkpoint every N epochs [25]")
        if name == "export":
            command.add_argument(
                "dest", type=Path, help="the series folder to write (results/study-a/series/...)"
            )
    args = parser.parse_args(argv)
    record = getattr(args, "record", None)
    if record is not None and not (record / "config.json").is_file():
        parser.error(f"{record}: no config.json (valid: a run record under results/study-a/)")
    if getattr(args, "every", 1) < 1:
        parser.error(f"--every {args.every}: give a positive number of epochs")
    if args.command in ("check", "export") and not (args.out / "DONE").is_file():
        parser.error(f"{args.out}: not a finished run (train it first: the train command)")
    return args


def train(record: Path, out: Path, every: int) -> int:
    """Retrain `record`'s config into `out` with a checkpoint every `every` epochs (resumable)."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "config.json").is_file():
        config = json.loads((record / "config.json").read_text())
        config["train"]["checkpoint_every"] = every
        (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    command = [
        sys.executable,
        "-m",
        "interp",
        "train",
        "--resume",
        str(out),
        "--threads",
        "1",
        "--no-progress",
    ]
    return subprocess.call(command)


def check(record: Path, out: Path) -> bool:
    """Print whether `out`'s metrics equal `record`'s at every evaluation; True if they do."""
    from interp.store.provenance import machine
    from interp.store.run_folder import read_metrics, run_machines

    if (theirs := run_machines(record)) and theirs != [machine()]:
        print(f"the record was trained on {theirs}, this run on {[machine()]}: they need not agree")
    ours = {r["step"]: r for r in read_metrics(out)}
    theirs = {r["step"]: r for r in read_metrics(record)}
    if sorted(ours) != sorted(theirs):
        print(f"the evaluations differ: {len(ours)} here, {len(theirs)} in the record")
        return False
    worst = max(
        (
            (abs(ours[s][k] - theirs[s][k]), s, k)
            for s in theirs
            for k in theirs[s]
            if k != "step" and k in ours[s]
        ),
        default=(0.0, None, None),
    )
    if worst[0] == 0.0:
        print(f"equal: all {len(theirs)} evaluations, every metric, bit for bit")
        return True
    print(f"not equal: the largest difference is {worst[0]:.3g} ({worst[2]} at epoch {worst[1]:,})")
    for name, folder in (("record", record), ("retrained", out)):
        milestones = json.loads((folder / "DONE").read_text()).get("milestones", {})
        print(f"  {name}: " + ", ".join(f"{k} at {v.get('step')}" for k, v in milestones.items()))
    return False


def export(record: Path, out: Path, dest: Path) -> None:
    """Copy `out`'s record and its series' weights into `dest`."""
    from analyses.studies.study_a.evolution import phase2
    from analyses.studies.study_a.series_choice import series_steps
    from interp.store import export_run, export_weights, list_checkpoints
    from interp.store.run_folder import read_metrics

    rise = phase2(read_metrics(out))
    steps = series_steps(list_checkpoints(out), rise and rise.onset, rise and rise.end)
    if dest.exists():
        shutil.rmtree(dest)
    export_run(out, dest)
    chosen = export_weights(out, dest, steps=steps)
    print(f"{dest}: {len(chosen)} checkpoints, epochs {chosen[0]:,} to {chosen[-1]:,} (record: {record})")


def main(argv: list[str] | None = None) -> int:
    """Run the command; 2 on a bad command line, 1 when `check` finds a difference."""
    args = _arguments(argv)
    if args.command == "choose":
        from analyses.studies.study_a.series_choice import dissection_runs
        from interp.store.provenance import machine

        here = machine()
        print(f"among the runs trained on this machine, {here['cpu']} ({here['cpu_capability']}):")
        for choice in dissection_runs(args.results, here):
            print(f"{choice.name}: {choice.run.spec.out if choice.run else '-'} ({choice.why})")
        return 0
    if args.command == "train":
        return train(args.record, args.out, args.every)
    if args.command == "check":
        return 0 if check(args.record, args.out) else 1
    export(args.record, args.out, args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
