"""Sweeps: a list of run specs, trained idempotently into one folder.

A `RunSpec` is everything needed to (re)start one run: its folder and its model, task and
training configs as plain dicts (picklable, JSON-able, so it travels to worker processes and
cluster jobs). A sweep folder holds `sweep.json` (the specs, written once) and one run folder
per spec. Running a sweep again skips finished runs (`DONE`) and resumes interrupted ones from
their `LATEST` checkpoint, so a sweep killed at any point finishes by being run again. Two sweeps
may run on one folder at once: a run whose lock another live process holds is skipped, and
once that process lets go, its result is taken (or, if it died, the run is trained here), so
every run is trained exactly once between them.

Per-run seeds derive from the sweep seed (`derive_seed`): the model seed from the sweep seed,
the seed index and the model config (so every noise level of one seed
starts from the same initialisation), the data seed from the sweep seed and the seed index
(so every configuration of one seed index sees the same data).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from interp.errors import ConfigError, RunsInterrupted
from interp.plugins import refuse_registered
from interp.signals import stop_on_signals
from interp.store.atomic import atomic_write_json
from interp.store.export import export_run
from interp.store.layout import FORMAT_VERSION, read_json
from interp.store.run_folder import is_done, is_locked, read_done
from interp.sweep.executors import Executor, in_this_process
from interp.sweep.outcome import Outcome

SWEEP_FILE = "sweep.json"


@dataclass(frozen=True)
class RunSpec:
    """One run to train: its folder and its three configs (JSON dicts).

    Attributes:
        out: The run folder.
        model: Model config dict (with ``kind``).
        task: Task config dict (with ``name``).
        train: Training config dict (`interp.training.config.TrainConfig` fields).
        tags: The run's coordinates in its sweep (e.g. ``{"preset": ..., "r": 0.9, "seed": 3}``).
    """

    out: Path
    model: dict[str, Any]
    task: dict[str, Any]
    train: dict[str, Any]
    tags: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        """The run's config.json content (what training writes there, before its version stamps)."""
        return {"model": self.model, "task": self.task, "train": self.train}

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data."""
        return {
            "out": str(self.out),
            "model": self.model,
            "task": self.task,
            "train": self.train,
            "tags": self.tags,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Rebuild a spec from `to_dict`'s output."""
        return cls(Path(data["out"]), data["model"], data["task"], data["train"], data.get("tags", {}))


def derive_seed(sweep_seed: int, *parts: Any) -> int:
    """A 31-bit seed determined by the sweep seed and `parts` (JSON-able), stable across runs."""
    text = json.dumps([sweep_seed, *parts], sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") >> 1


def seed_folder(out: str | Path, seed: int) -> Path:
    """The folder of seed `seed` under `out` (``out/seed_3``): one name for every multi-seed layout."""
    return Path(out) / f"seed_{seed}"


def seed_folders(out: str | Path) -> dict[int, Path]:
    """The seed folders under `out` (those `seed_folder` names), by seed in increasing order."""
    found = {int(f.name[5:]): f for f in Path(out).glob("seed_*") if f.is_dir() and f.name[5:].isdigit()}
    return dict(sorted(found.items()))


def write_sweep(sweep_dir: str | Path, specs: Sequence[RunSpec], meta: dict[str, Any]) -> Path:
    """Create `sweep_dir/sweep.json`, or check that an existing one lists the same runs.

    Raises:
        ConfigError: If the folder already holds a different sweep.
    """
    sweep_dir = Path(sweep_dir)
    content = {
        "format_version": FORMAT_VERSION,
        "meta": meta,
        "runs": [_relative(s, sweep_dir) for s in specs],
    }
    path = sweep_dir / SWEEP_FILE
    if path.exists():
        existing = read_json(path, what="sweep file")
        if existing.get("runs") != json.loads(json.dumps(content["runs"])):
            raise ConfigError(f"{sweep_dir} already holds a different sweep", "choose a new --out folder")
        return path
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, content)
    return path


def _relative(spec: RunSpec, sweep_dir: Path) -> dict[str, Any]:
    data = spec.to_dict()
    data["out"] = str(Path(spec.out).relative_to(sweep_dir))
    return data


def read_sweep(sweep_dir: str | Path) -> tuple[list[RunSpec], dict[str, Any]]:
    """Return the run specs (with absolute folders) and metadata of a sweep folder."""
    sweep_dir = Path(sweep_dir)
    data = read_json(sweep_dir / SWEEP_FILE, what="sweep file")
    specs = [RunSpec.from_dict({**run, "out": str(sweep_dir / run["out"])}) for run in data["runs"]]
    return specs, data.get("meta", {})


def export_records(sweep_dir: str | Path, dest: str | Path) -> list[Path]:
    """Copy a sweep's compact records (sweep.json, and each run's: `interp.store.export.export_run`)
    into `dest`.

    What a repository keeps of a long experiment (`results/`): enough to rebuild every rate,
    table and training curve, a few kB a run. An unfinished run is copied without DONE, so a
    report shows how far it got. Returns the run folders written.
    """
    import shutil

    sweep_dir, dest = Path(sweep_dir), Path(dest)
    specs, _ = read_sweep(sweep_dir)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sweep_dir / SWEEP_FILE, dest / SWEEP_FILE)
    written = []
    for spec in specs:
        if not Path(spec.out).is_dir():
            continue  # not started: nothing to keep (the report lists it from sweep.json)
        written.append(export_run(spec.out, dest / Path(spec.out).relative_to(sweep_dir)))
    return written


def take_finished_records(records: str | Path, sweep_dir: str | Path) -> list[Path]:
    """Copy the finished runs of exported `records` into `sweep_dir`, so a sweep skips them.

    The way back of `export_records`, for a sweep resumed on a machine that lost its run folders:
    a run whose record holds DONE is finished, and a sweep does not retrain a finished run, so
    copying its record (`export_run`) is enough (it has no checkpoints: dissect it from weights
    exported separately). Run folders `sweep_dir` already holds, and unfinished records, are
    left alone: those runs train (or resume) as usual. Returns the run folders written.
    """
    records, sweep_dir = Path(records), Path(sweep_dir)
    taken = []
    for done in sorted(records.rglob("DONE")):
        target = sweep_dir / done.parent.relative_to(records)
        if target.exists():
            continue
        taken.append(export_run(done.parent, target))
    return taken


def run_sweep(
    specs: Sequence[RunSpec],
    worker: Callable[[RunSpec], Any],
    executor: Executor,
    *,
    progress: bool = True,
    poll_s: float = 0.5,
) -> Iterator[Outcome[RunSpec]]:
    """Train every unfinished run with `executor`, yielding an outcome per run.

    Finished runs are not retrained: their outcome carries the summary from `DONE`. A run
    that fails is reported in its outcome and does not stop the others. A run another live
    process is training (its lock is held) is waited for after the others: its outcome then
    carries that process's `DONE` (``elsewhere=True``), or, if the process stopped without
    finishing it, the run is trained here.

    Raises:
        PluginError: Before any run starts, if `executor` uses other processes and a pending
            run's task was registered in this process only (`tasks.register_task`).
    """
    done = [s for s in specs if is_done(s.out)]
    pending = [s for s in specs if not is_done(s.out)]
    if pending and not in_this_process(executor, len(pending)):
        for spec in pending:  # up front: a worker would fail each run on an unknown task
            refuse_registered(
                "a sweep", {"interp.tasks": spec.task.get("name")}, "train it in this process (jobs=1)"
            )
    bar = tqdm(total=len(specs), initial=len(done), disable=not progress, unit="run")
    with bar, stop_on_signals() as stop:  # one stop state from the first run to the last wait
        for spec in done:
            yield Outcome(spec, read_done(spec.out))
        while pending:
            busy = []
            for outcome in executor.map(worker, pending):
                if outcome.busy:
                    busy.append(outcome.item)
                    continue
                bar.update(1)
                yield outcome
            pending = []
            for spec in busy:
                while is_locked(spec.out):
                    if stop.signum is not None:
                        raise RunsInterrupted(stop.signum, 0, len(busy))
                    time.sleep(poll_s)
                if is_done(spec.out):
                    bar.update(1)
                    yield Outcome(spec, read_done(spec.out), elsewhere=True)
                else:  # its process stopped before finishing it: train it here
                    pending.append(spec)
