"""Run a single-checkpoint analysis over every checkpoint of a run, cached per step.

`evolve` walks a run's checkpoints in step order, loading one at a time (so memory stays that
of one model), and saves each result under `RUN/analyses/NAME/step_N/` - the same folder the
CLI's single-checkpoint commands write by default. A cached result is reused only if it was
computed with the same parameters, so re-plotting never recomputes and changing a parameter
never returns stale numbers. The results come back joined with `metrics.jsonl` by step.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from analyses.base import RESULT_FILE, Analysis, Result
from analyses.subject import subject_series
from interp.config import to_dict
from interp.errors import CheckpointError, ConfigError
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
        **values: `Params` fields, when `params` is not given.

    Raises:
        ConfigError: On an unknown analysis or parameter, or both `params` and `values`.
        CheckpointError: If the run has no checkpoints, or `checkpoints` names a step it has
            no checkpoint of.
    """
    from analyses import get_analysis

    analysis = get_analysis(analysis) if isinstance(analysis, str) else analysis
    params = _params(analysis, params, values)
    run = RunHandle.open(run_dir)
    steps = run.select_steps(checkpoints)  # one listing of the checkpoint folder
    if not steps:
        raise CheckpointError(
            f"{run.run_dir} has no checkpoints to evolve over", "train it first (interp train)"
        )
    wanted = json.loads(json.dumps(to_dict(params)))
    folders = {step: run.result_folder(analysis.name, step, cache) for step in steps}
    save = writable(folders[steps[0]])
    results = {step: _cached(folders[step], analysis, wanted) for step in steps}
    missing = [step for step in steps if results[step] is None]
    # One model and one set of splits for the whole series (`subject_series`): a checkpoint
    # then costs its weights' load and the analysis, not a model build and a data rebuild.
    series = subject_series(run, missing)
    for subject in tqdm(series, total=len(missing), disable=not progress, unit="ckpt", desc=analysis.name):
        result = analysis.compute(subject, params)
        if save:
            result.save(folders[subject.step], figure=False)
        results[subject.step] = result
    return Evolution(run.run_dir, analysis.name, steps, [results[step] for step in steps], run.metrics())


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


def _cached(folder: Path, analysis: Analysis, wanted: dict[str, Any]) -> Result | None:
    try:
        stored = json.loads((folder / RESULT_FILE).read_text())
    except (OSError, ValueError):
        return None
    if stored.get("fields", {}).get("params") != wanted:
        return None
    try:
        return analysis.result.load(folder)
    except CheckpointError:
        return None
