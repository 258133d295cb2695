"""Run a single-checkpoint analysis over every checkpoint of a run, cached per step and settings.

`evolve` walks a run's checkpoints in step order, loading one at a time (so memory stays that
of one model), and saves each result under `RUN/analyses/NAME/step_N/` at the analysis's
default parameters, and under `RUN/analyses/NAME/SETTINGS/step_N/` at others, SETTINGS naming
the fields that differ (`settings_folder`: ``restrict=L0H0``, ``batch_size=256__restrict=L0H0``)
- the same folders the CLI's single-checkpoint commands write by default. So the curves of one
run at several settings (`llc` of the whole model and of each head) are cached side by side. A
cached result is reused only if it was computed with the same parameters (and, for an analysis
whose parameters name an input, such as `llc`'s calibration folder, the same input:
`Analysis.cache_key`), so re-plotting never recomputes and changing a setting never returns
stale numbers. A result cached before settings had folders (at ``NAME/step_N`` whatever its
parameters) is still read where its parameters match. The results come back joined with
`metrics.jsonl` by step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from analyses.base import RESULT_FILE, Analysis, Result
from analyses.subject import subject_series
from interp.config import to_dict
from interp.errors import CheckpointError, ConfigError
from interp.plugins import refuse_registered
from interp.store.handle import RunHandle, writable


@dataclass(frozen=True)
class Evolution:
    """An analysis's results at every checkpoint of a run, with the run's metrics.

    Attributes:
        run_dir: The run folder.
        analysis: The analysis name.
        steps: Checkpoint steps, increasing.
        results: One result per step.
        metrics: The run's metrics records (all evaluated steps).
    """

    run_dir: Path
    analysis: str
    steps: list[int]
    results: list[Result]
    metrics: list[dict[str, Any]]

    def to_frame(self):  # noqa: ANN201 - pandas is imported lazily
        """Every result's frame stacked, with a ``step`` column, joined with that step's metrics."""
        import pandas as pd

        frames = [r.to_frame().assign(step=s) for s, r in zip(self.steps, self.results)]
        stacked = pd.concat(frames, ignore_index=True)
        metrics = pd.DataFrame(self.metrics)
        return stacked.merge(metrics, on="step", how="left") if len(metrics) else stacked


def evolve(
    run_dir: str | Path | RunHandle,
    analysis: str | Analysis,
    params: Any = None,
    *,
    checkpoints: str | Iterable[int] | None = None,
    progress: bool = True,
    cache: str | Path | None = None,
    jobs: int = 1,
    **values: Any,
) -> Evolution:
    """Compute (or load from cache) `analysis` at every checkpoint of `run_dir` (or those chosen).

    Either ``evolve(run, "grads", split="train")`` (the analysis's parameters as keywords) or
    ``evolve(run, grads, grads.params(split="train"))``.

    Args:
        run_dir: A run folder with checkpoints, or the run opened (`interp.store.handle.RunHandle`):
            its config is read once for the whole series.
        analysis: A registered analysis, or its name.
        params: Its `Params` (default: built from `values`).
        checkpoints: Only these checkpoints: steps, or text such as ``"100-300"`` or
            ``"0,100-300"`` (`interp.store.handle.RunHandle.select_steps`); default all.
        progress: Show a progress bar over checkpoints.
        cache: The folder that caches results per analysis and step (default: ``RUN/analyses``).
            A cache folder that cannot be written (a read-only run) is only read: nothing is
            written then, and every result not cached yet is computed.
        jobs: Worker processes that compute the missing results side by side, each on its share
            of the torch threads, writing them to the cache (from which they are read back);
            1 computes them here. A cache that cannot be written is computed here.
        **values: `Params` fields, when `params` is not given.

    Raises:
        ConfigError: On an unknown analysis or parameter, both `params` and `values`, or a
            `jobs` that is not an integer >= 1.
        PluginError: With `jobs` > 1, for an analysis or task registered in this process only.
        CheckpointError: If the run has no checkpoints, or `checkpoints` names a step it has
            no checkpoint of.
    """
    from analyses import get_analysis

    analysis = get_analysis(analysis) if isinstance(analysis, str) else analysis
    params = _params(analysis, params, values)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs={jobs!r} is not a number of worker processes", "give an integer >= 1")
    run = RunHandle.open(run_dir)
    if jobs > 1:
        refuse_registered(
            "evolve with jobs > 1",
            {"interp.analyses": analysis.name, "interp.tasks": run.config["task"]["name"]},
            "compute it here (jobs=1)",
        )
    steps = run.select_steps(checkpoints)  # one listing of the checkpoint folder
    if not steps:
        raise CheckpointError(
            f"{run.run_dir} has no checkpoints to evolve over", "train it first (interp train)"
        )
    wanted = _wanted(analysis, params)
    settings = settings_folder(analysis, params)
    folders = {step: run.result_folder(analysis.name, step, cache, settings) for step in steps}
    save = writable(folders[steps[0]])
    results = {step: _cached(folders[step], analysis, wanted) for step in steps}
    if settings:  # a result cached before settings had folders: at NAME/step_N, if its params match
        for step in [step for step in steps if results[step] is None]:
            results[step] = _cached(run.result_folder(analysis.name, step, cache), analysis, wanted)
    missing = [step for step in steps if results[step] is None]
    if jobs > 1 and save and len(missing) > 1:
        _in_workers(run, analysis, params, {step: folders[step] for step in missing}, jobs, progress)
        for step in missing:
            results[step] = analysis.result.load(folders[step])
    else:
        bar = tqdm(total=len(missing), disable=not progress, unit="ckpt", desc=analysis.name)
        for step, result in _series(run, analysis, params, missing, folders if save else None):
            results[step] = result
            bar.update()
        bar.close()
    return Evolution(run.run_dir, analysis.name, steps, [results[step] for step in steps], run.metrics())


def _series(
    run: RunHandle | Path, analysis: Analysis, params: Any, steps: list[int], folders: dict[int, Path] | None
) -> Iterator[tuple[int, Result]]:
    """`analysis` at each of `steps`, saved into its folder of `folders` (None: not saved)."""
    # One model and one set of splits for the whole series (`subject_series`): a checkpoint
    # then costs its weights' load and the analysis, not a model build and a data rebuild.
    for subject in subject_series(run, steps):
        result = analysis.compute(subject, params)
        if folders is not None:
            result.save(folders[subject.step], figure=False, durable=False)  # a cache: checked when read
        yield subject.step, result


def _worker(run_dir: Path, analysis: Analysis, params: Any, folders: dict[int, Path], threads: int) -> int:
    """A worker process's share of `_in_workers`: compute and save; the count done."""
    import torch

    torch.set_num_threads(threads)
    return sum(1 for _ in _series(run_dir, analysis, params, list(folders), folders))


def _in_workers(
    run: RunHandle, analysis: Analysis, params: Any, folders: dict[int, Path], jobs: int, progress: bool
) -> None:
    """Compute `analysis` at the steps of `folders` in `jobs` worker processes, saving each result.

    The steps go out in contiguous chunks, a few per worker, so that each worker builds its model
    and splits once a chunk and the progress bar still moves; the torch threads of this process
    are shared between the workers.
    """
    import torch
    from joblib import Parallel, delayed

    steps = list(folders)
    size = max(1, math.ceil(len(steps) / (4 * jobs)))
    chunks = [steps[i : i + size] for i in range(0, len(steps), size)]
    threads = max(1, torch.get_num_threads() // jobs)
    tasks = (
        delayed(_worker)(run.run_dir, analysis, params, {step: folders[step] for step in chunk}, threads)
        for chunk in chunks
    )
    with tqdm(total=len(steps), disable=not progress, unit="ckpt", desc=analysis.name) as bar:
        for done in Parallel(n_jobs=min(jobs, len(chunks)), return_as="generator_unordered")(tasks):
            bar.update(done)


def _params(analysis: Analysis, params: Any, values: dict[str, Any]) -> Any:
    if params is not None and values:
        raise ConfigError(
            f"give {analysis.name}'s params or its fields as keywords, not both",
            f"e.g. evolve(run, {analysis.name!r}, {', '.join(f'{k}=...' for k in values)})",
        )
    if params is not None:
        return params
    try:
        return analysis.params(**values)
    except TypeError as err:  # an unknown field
        fields = [f.name for f in dataclasses.fields(analysis.params)]
        raise ConfigError(f"{analysis.name}: {err}", f"valid: {', '.join(fields)}") from None


SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,+-]{1,40}")
"""A parameter value written as it is in a settings folder's name; others go by a hash."""


def settings_folder(analysis: Analysis, params: Any) -> str:
    """The folder name of `params`' results: empty at the analysis's defaults, else the fields
    that differ as ``name=value`` joined by ``__`` in field order (``restrict=L0H0``), a value
    that is long or holds other characters than `SAFE_VALUE`'s (a folder path) as ``h`` and 12
    hex digits of its hash. Distinct settings get distinct folders.
    """
    defaults = to_dict(analysis.params())
    parts = []
    for name, value in to_dict(params).items():
        if value == defaults.get(name):
            continue
        text = json.dumps(value) if not isinstance(value, str) else value
        if not SAFE_VALUE.fullmatch(text):
            text = "h" + hashlib.sha256(json.dumps(value).encode()).hexdigest()[:12]
        parts.append(f"{name}={text}")
    return "__".join(parts)


def _wanted(analysis: Analysis, params: Any) -> dict[str, Any]:
    """What a cached result's fields must hold to be reused: its params, and the inputs they name
    (`Analysis.cache_key`), as JSON gives them back.
    """
    inputs = analysis.cache_key(params) if analysis.cache_key is not None else {}
    return json.loads(json.dumps({**inputs, "params": to_dict(params)}))


def _cached(folder: Path, analysis: Analysis, wanted: dict[str, Any]) -> Result | None:
    try:
        stored = json.loads((folder / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    fields = stored.get("fields", {})
    if any(fields.get(key) != value for key, value in wanted.items()):
        return None
    try:
        return analysis.result.load(folder)
    except CheckpointError:
        return None
