"""The models a study-B table is about, kept small enough to commit, so a reader can dissect them.

A protocol's exported state (`analyses.studies.study_b.state`) holds each seed's AdamW model and
its walk's final state, not the sample that was injected nor the models after injection: those
are recomputed from the state (`interp study-b measure` on a restored folder: production and the
six injections take minutes). `export_models(out, dest)` keeps them from such a measured folder,
weights only (no optimiser or RNG state: they are for dissecting, not for resuming), as run
folders that `analyses.load_subject` opens:

* ``seed_N/wlmd-sample/``: the samples run's ``config.json`` and ``metrics.jsonl`` (where each
  sample came from) and the injected sample's checkpoint (`measure.injected_sample`);
* ``seed_N/inject-<model>-<noise>/``: each injection's ``config.json``, ``DONE``,
  ``metrics.jsonl`` and its final checkpoint;

plus ``study_b_runs.csv``, the retention rows of these very models (`tables.table`), since a
recomputation on another machine rounds float32 otherwise and need not repeat the records'
numbers (docs/study_b_history.md says by how much).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from pathlib import Path

from analyses.studies.study_b.measure import injected_sample, measured_settings, selected_seeds
from analyses.studies.study_b.records import relative_to_folder
from analyses.studies.study_b.tables import table
from interp.errors import ConfigError
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.layout import CHECKPOINTS_DIR, LATEST_FILE
from interp.store.run_folder import DONE_FILE, is_done

WEIGHT_FILES = ("model.safetensors", "manifest.json")  # what dissecting a checkpoint needs
RUN_FILES = ("config.json", "metrics.jsonl", DONE_FILE)
SAMPLE_RUN = "wlmd-sample"


def export_models(out: str | Path, dest: str | Path, seeds: Collection[int] | None = None) -> list[Path]:
    """Copy each finished seed's injected sample and post-injection models from the measured
    folder `out` into `dest` (replacing what `dest` held for that seed).

    Returns:
        The run folders written.

    Raises:
        ConfigError: If no seed of `out` (among `seeds`) has finished its injections.
    """
    out, dest = Path(out), Path(dest)
    settings = measured_settings(out)
    written, finished = [], []
    for seed, folder in selected_seeds(out, seeds).items():
        runs = sorted(p for p in folder.glob("inject-*") if is_done(p))
        sample = injected_sample(folder / "wlmd", settings)
        if not runs or sample is None:
            continue
        target = dest / folder.name
        shutil.rmtree(target, ignore_errors=True)
        written.append(_copy_checkpoint(folder / "wlmd" / "samples", sample, target / SAMPLE_RUN, out))
        for run in runs:
            final = checkpoint_dir(run, list_checkpoints(run)[-1])
            written.append(_copy_checkpoint(run, final, target / run.name, out))
        finished.append(seed)
    if not finished:
        raise ConfigError(
            f"{out} holds no seed with a sample and finished injections",
            "run interp study-b measure on a restored state first",
        )
    rows = table(out, finished)
    rows["source"] = [relative_to_folder(s, out) for s in rows["source"]]  # the folder may move
    rows.to_csv(dest / "study_b_runs.csv", index=False)
    return written


def _copy_checkpoint(run: Path, checkpoint: Path, target: Path, out: Path) -> Path:
    """`run`'s records and the weights of one `checkpoint` of it, as a run folder at `target`
    (an injection's source checkpoint written relative to the measured folder `out`).
    """
    (target / CHECKPOINTS_DIR / checkpoint.name).mkdir(parents=True)
    for name in RUN_FILES:
        if (run / name).exists():
            shutil.copy2(run / name, target / name)
    config = target / "config.json"
    if config.exists():
        data = json.loads(config.read_text())
        if "source" in data.get("injection", {}):
            data["injection"]["source"] = relative_to_folder(
                data["injection"]["source"], out
            )  # the folder may move
            config.write_text(json.dumps(data, indent=2) + "\n")
    for name in WEIGHT_FILES:
        shutil.copy2(checkpoint / name, target / CHECKPOINTS_DIR / checkpoint.name / name)
    (target / CHECKPOINTS_DIR / LATEST_FILE).write_text(checkpoint.name + "\n")
    return target
