"""Study A's mechanism test: is token parity written into the embedding before phase 2?

**The hypothesis.** With the positional shortcut (label: parity of the sum; shortcut: parity of
``x[0]``), fitting the shortcut already requires the parity of *every* token value, because
any value can stand at position 0. So during phase 1 gradient descent writes a token-parity
direction into the embedding ``W_E``, and that direction is available when phase 2 builds the
rule (the parity of the sum needs every token's parity too). With the max shortcut (parity of
the largest token), fitting the shortcut needs the parity of the *largest* values only, so
token parity should stay absent from ``W_E``, or present for the large values only.

**The measure** (`interp.dissect.probes`, the embedding probe of `interp probe`): token parity
decoded by a logistic-regression probe from the rows of ``W_E`` (the readout token's row left
out), scored on *held-out token values* by stratified cross-validation over the values, at
every checkpoint of a run. Beside it, two baselines: the same probe on randomly permuted
parities (`shuffles` permutations at every checkpoint: the level a probe reaches on a
labelling the embedding cannot carry, with this many rows and dimensions; their 95th
percentile is the baseline drawn and checked) and the run's initial checkpoint (the first
point of every curve). The accuracy is also read on the larger half of
the values and on the smaller half (the same cross-validated predictions), which tells
"partial" (parity of the large values only) from "absent".

**The rule, fixed before any run of the test was analysed** (`summarise_runs`, `summarise_shortcuts`, `verdict`):

* A run *decodes* parity at the first checkpoint whose held-out accuracy over all values is at
  least `Params.threshold` (0.9). Its *reference epoch* is its phase-2 onset
  (`analyses.studies.study_a.evolution.phase2`, the library's `interp.metrics.find_rise`) if it has a
  phase 2, else its last checkpoint (the run never found the rule).
* Per run: decoded *before phase 2* (first decoding epoch at or before the onset), *after the
  onset*, *without a phase 2* (decoded, no phase 2), or *never*. A run whose initial
  checkpoint or any permuted-label baseline (the 95th percentile of the permutations at a
  checkpoint) reaches the threshold is *flagged*: the threshold does not separate the
  embedding from chance there, and the run counts as not decoded.
* Per shortcut, over its seeds: the number of runs decoded by their reference epoch, of runs
  with a phase 2, of those decoded at or before their onset, and the median lag (first
  decoding epoch minus onset).
* **Verdict.** *Supported* if (i) at least 2/3 of the ``first`` runs are decoded by their
  reference epoch and no ``first`` run with a phase 2 decodes only after its onset, and (ii)
  the rate of ``max`` runs decoded by their reference epoch is at most half of the ``first``
  rate. *Contradicted* if the ``max`` rate is at least the ``first`` rate, or most ``first``
  runs with a phase 2 decode only after their onset. *Mixed* otherwise. With 3-5 seeds a side
  these are descriptions of the seeds, not tests at a significance level.

Checkpoints come every 100 epochs plus log-spaced ones, so "at or before the onset" is read
at that resolution; the onset itself comes from the metrics (every 25 epochs).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
import torch
from torch import Tensor

from analyses.base import Result, param
from analyses.studies.study_a.evolution import phase2
from interp.config import to_dict
from interp.dissect.probes import embedding_predictions, shuffled_embedding_accuracies
from interp.errors import ConfigError
from interp.store import checkpoint_dir, list_checkpoints, load_checkpoint, read_config, read_metrics

if TYPE_CHECKING:
    import plotly.graph_objects as go

VALUE_SETS = {"all": "all values", "top": "the larger half of the values", "bottom": "the smaller half"}


@dataclass(frozen=True)
class Params:
    """Parameters of the mechanism test."""

    threshold: float = param(0.9, "Held-out probe accuracy at which a checkpoint decodes token parity.")
    folds: int = param(5, "Folds of the cross-validation over token values.")
    c: float = param(1.0, "Inverse L2 regularisation strength of the probe.")
    shuffles: int = param(10, "Label permutations of the baseline at every checkpoint.")
    seed: int = param(0, "Seed of the folds and the permutations.")


@dataclass(frozen=True)
class RunSeries:
    """The embedding probe at every checkpoint of one run (lists over checkpoints, step order).

    Attributes:
        label: How tables and figures name the run (its shortcut, vocabulary and seed folder).
        shortcut: The task's shortcut (``first`` or ``max``).
        vocab: Token values of the task.
        onset: Phase-2 onset epoch (None: no phase 2); `end` its end.
        series: ``steps``, ``all`` / ``top`` / ``bottom`` (held-out accuracy on all values, the
            larger half, the smaller half), ``shuffled_mean`` and ``shuffled_high`` (mean and
            95th percentile of the permuted-label accuracies).
    """

    label: str
    shortcut: str
    vocab: int
    onset: int | None
    end: int | None
    series: dict[str, list[float]]


def _check(params: Params) -> None:
    if not 0.5 < params.threshold <= 1:
        raise ConfigError(f"threshold={params.threshold} is out of range", "valid: above 0.5, at most 1")
    if params.folds < 2 or params.shuffles < 1:
        raise ConfigError(
            f"folds={params.folds}, shuffles={params.shuffles} are too few",
            "valid: folds >= 2, shuffles >= 1",
        )


def probe_embeddings(embeddings: Iterable[tuple[int, Tensor]], params: Params) -> dict[str, list[float]]:
    """The token-parity probe on ``W_E`` at each step (the series of `RunSeries`).

    Args:
        embeddings: ``(step, W_E)`` pairs, ``W_E`` [d_vocab, d_model] whose last row is the
            readout token (study A's ``SEP = V``); rows ``0..V-1`` are the token values.
        params: The probe's settings.
    """
    _check(params)
    out: dict[str, list[float]] = {k: [] for k in ("steps", *VALUE_SETS, "shuffled_mean", "shuffled_high")}
    for step, w_e in embeddings:
        rows = w_e[:-1].detach().double()
        values = torch.arange(len(rows))
        parity = values % 2
        correct = embedding_predictions(rows, parity, params.folds, params.c, params.seed).double()
        top = values >= len(values) // 2
        shuffled = shuffled_embedding_accuracies(
            rows, parity, params.shuffles, params.folds, params.c, params.seed
        )
        out["steps"].append(step)
        out["all"].append(float(correct.mean()))
        out["top"].append(float(correct[top].mean()))
        out["bottom"].append(float(correct[~top].mean()))
        out["shuffled_mean"].append(float(shuffled.mean()))
        out["shuffled_high"].append(float(torch.quantile(shuffled, 0.95)))
    return out


def run_label(run_dir: str | Path, config: dict[str, Any]) -> str:
    """``first, vocab 32, seed_0``: the run's shortcut, vocabulary and seed folder (no path)."""
    task = config["task"]
    return f"{task.get('shortcut')}, vocab {task.get('vocab')}, {Path(run_dir).name}"


def run_series(run_dir: str | Path, params: Params = Params()) -> RunSeries:
    """`probe_embeddings` over every checkpoint of a run (read only), with its phase 2."""
    config = read_config(run_dir)
    steps = list_checkpoints(run_dir)
    if not steps:
        raise ConfigError(f"run {Path(run_dir).name} has no checkpoint", "the test needs its checkpoints")

    def embeddings() -> Iterable[tuple[int, Tensor]]:
        for step in steps:
            ckpt = load_checkpoint(checkpoint_dir(run_dir, step), load_train_state=False)
            yield step, ckpt.state_dict["embed.W_E"]

    rise = phase2(read_metrics(run_dir))
    return RunSeries(
        label=run_label(run_dir, config),
        shortcut=str(config["task"].get("shortcut")),
        vocab=int(config["task"].get("vocab")),
        onset=None if rise is None else rise.onset,
        end=None if rise is None else rise.end,
        series=probe_embeddings(embeddings(), params),
    )


def mechanism(
    run_dirs: Sequence[str | Path], params: Params = Params(), *, jobs: int = 1, progress: bool = False
) -> MechanismResult:
    """The mechanism test over runs: the embedding probe at every checkpoint of each, and each
    run's phase 2, as one `MechanismResult` (runs in the order given; `jobs` worker processes).
    """
    from joblib import Parallel, delayed
    from tqdm import tqdm

    run_dirs = list(run_dirs)
    if jobs == 1:
        runs = [run_series(r, params) for r in tqdm(run_dirs, disable=not progress, desc="runs")]
    else:
        runs = Parallel(n_jobs=jobs)(delayed(run_series)(r, params) for r in run_dirs)
    return MechanismResult.from_runs(runs, params)


SERIES = ("all", "top", "bottom", "shuffled_mean", "shuffled_high")


@dataclass(frozen=True)
class MechanismResult(Result):
    """The embedding probe over the checkpoints of several runs, with each run's phase 2.

    Attributes:
        runs: Run labels (`run_label`); `shortcuts`, `vocabs`, `onsets`, `ends` per run.
        run_index: The run of each row, int64 [rows] (a row: one checkpoint of one run).
        steps: The checkpoint's epoch, int64 [rows].
        all / top / bottom: Held-out accuracy on all values, the larger half, the smaller
            half, float64 [rows].
        shuffled_mean / shuffled_high: Mean and 95th percentile of the permuted-label
            accuracies at that checkpoint, float64 [rows].
    """

    analysis: ClassVar[str] = "study-a-mechanism"
    runs: list[str]
    shortcuts: list[str]
    vocabs: list[int]
    onsets: list[int | None]
    ends: list[int | None]
    run_index: Tensor
    steps: Tensor
    all: Tensor
    top: Tensor
    bottom: Tensor
    shuffled_mean: Tensor
    shuffled_high: Tensor

    @classmethod
    def from_runs(cls, runs: Sequence[RunSeries], params: Params) -> MechanismResult:
        """Stack `RunSeries` into one result."""
        if not runs:
            raise ConfigError("the mechanism test got no run", "give it run folders with checkpoints")
        index = [i for i, r in enumerate(runs) for _ in r.series["steps"]]
        column = {k: [v for r in runs for v in r.series[k]] for k in ("steps", *SERIES)}
        return cls(
            params=to_dict(params),
            step=None,
            runs=[r.label for r in runs],
            shortcuts=[r.shortcut for r in runs],
            vocabs=[r.vocab for r in runs],
            onsets=[r.onset for r in runs],
            ends=[r.end for r in runs],
            run_index=torch.tensor(index, dtype=torch.int64),
            steps=torch.tensor(column["steps"], dtype=torch.int64),
            **{k: torch.tensor(column[k], dtype=torch.float64) for k in SERIES},
        )

    def to_frame(self) -> pd.DataFrame:
        """One row per run and checkpoint: the run, its shortcut and phase 2, the epoch, the
        held-out accuracies and the permuted-label baseline.
        """
        i = self.run_index.tolist()
        return pd.DataFrame(
            {
                "run": [self.runs[k] for k in i],
                "shortcut": [self.shortcuts[k] for k in i],
                "vocab": [self.vocabs[k] for k in i],
                "onset": pd.array([self.onsets[k] for k in i], dtype="Int64"),
                "epoch": self.steps.tolist(),
                **{k: getattr(self, k).tolist() for k in SERIES},
            }
        )

    def run_summary(self) -> pd.DataFrame:
        """One row per run under the preregistered rule (module docstring)."""
        return summarise_runs(self.to_frame(), self.params["threshold"])

    def summary(self) -> pd.DataFrame:
        """One row per shortcut: the counts over its seeds (module docstring)."""
        return summarise_shortcuts(self.run_summary())

    def verdict(self) -> str:
        """*supported*, *contradicted* or *mixed* (the rule of the module docstring)."""
        return verdict(self.summary())

    def figure(self) -> go.Figure:
        """Held-out accuracy over epochs, one line per run coloured by shortcut, on all values,
        the larger half and the smaller half; each run's phase-2 onset a diamond on its line;
        the permuted-label baseline (95th percentile) grey; the threshold dashed.
        """
        from analyses.studies.study_a.mechanism_figure import mechanism_figure

        return mechanism_figure(self.to_frame(), self.params["threshold"])


def summarise_runs(frame: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per run: onset, first decoding epoch, reference epoch, outcome, lag, peak and final accuracy.

    Descriptive, outside the rule (added after a first look at real checkpoints, to read an
    outcome against the checkpoint cadence): ``last_before`` is the last checkpoint at or before
    the reference epoch, ``acc_before`` and ``baseline_before`` its accuracy and baseline.
    """
    rows = []
    for run, part in frame.groupby("run", sort=False):
        part = part.sort_values("epoch")
        onset = None if pd.isna(part["onset"].iloc[0]) else int(part["onset"].iloc[0])
        flagged = bool(part["all"].iloc[0] >= threshold or (part["shuffled_high"] >= threshold).any())
        hits = part.loc[part["all"] >= threshold, "epoch"]
        first = None if flagged or hits.empty else int(hits.iloc[0])
        reference = onset if onset is not None else int(part["epoch"].iloc[-1])
        before = part[part["epoch"] <= reference].iloc[-1]
        rows.append(
            {
                "run": run,
                "shortcut": part["shortcut"].iloc[0],
                "onset": onset,
                "decoded": first,
                "reference": reference,
                "outcome": _outcome(first, onset, flagged),
                "by_reference": first is not None and first <= reference,
                "lag": None if first is None or onset is None else first - onset,
                "last_before": int(before["epoch"]),
                "acc_before": float(before["all"]),
                "baseline_before": float(before["shuffled_high"]),
                "initial": float(part["all"].iloc[0]),
                "peak": float(part["all"].max()),
                "final": float(part["all"].iloc[-1]),
                "final_top": float(part["top"].iloc[-1]),
                "final_bottom": float(part["bottom"].iloc[-1]),
                "baseline_high": float(part["shuffled_high"].max()),
            }
        )
    return pd.DataFrame(rows)


def _outcome(first: int | None, onset: int | None, flagged: bool) -> str:
    if flagged:
        return "flagged"
    if first is None:
        return "never"
    if onset is None:
        return "without phase 2"
    return "before phase 2" if first <= onset else "after onset"


def summarise_shortcuts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per shortcut: runs, decoded by reference, with phase 2, decoded before the onset, after
    it, median lag and median peak and final accuracy.
    """
    rows = []
    for shortcut, part in runs.groupby("shortcut", sort=True):
        lags = [int(v) for v in part["lag"] if v is not None and not pd.isna(v)]
        with_phase2 = part[part["onset"].notna()]
        rows.append(
            {
                "shortcut": shortcut,
                "runs": len(part),
                "decoded_by_reference": int(part["by_reference"].sum()),
                "with_phase2": len(with_phase2),
                "before_phase2": int((with_phase2["outcome"] == "before phase 2").sum()),
                "after_onset": int((with_phase2["outcome"] == "after onset").sum()),
                "flagged": int((part["outcome"] == "flagged").sum()),
                "median_lag": statistics.median(lags) if lags else None,
                "median_peak": float(part["peak"].median()),
                "median_final": float(part["final"].median()),
            }
        )
    return pd.DataFrame(rows)


def verdict(summary: pd.DataFrame) -> str:
    """The preregistered reading of the per-shortcut summary (module docstring)."""
    by = {row["shortcut"]: row for _, row in summary.iterrows()}
    if not {"first", "max"} <= set(by):
        return "incomplete (needs runs of both shortcuts)"
    first, top = by["first"], by["max"]
    rate_first = first["decoded_by_reference"] / first["runs"]
    rate_max = top["decoded_by_reference"] / top["runs"]
    if rate_max >= rate_first or first["after_onset"] * 2 > first["with_phase2"] > 0:
        return "contradicted"
    if rate_first >= 2 / 3 and first["after_onset"] == 0 and rate_max <= rate_first / 2:
        return "supported"
    return "mixed"
