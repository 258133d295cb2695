"""Issue 50's reading (a): does the LLC rise while study C's MLP memorises and fall at grokking?

The reading's rules were fixed in docs/llc_readings.md before it ran. Per seed, from the run's
metrics, study C's times (`tasks.ModAddTask.milestones`): ``t_mem_noisy`` (first evaluation with
corrupted-train accuracy >= 99%) and ``t_gen`` (test accuracy >= 99%). With
``SE(a, b) = sqrt(se_a^2 + se_b^2)`` from the chains' standard errors, at the checkpoints nearest
each step:

* *rise while memorising*: ``LLC(t_mem_noisy) - LLC(10) > 2 SE``;
* *fall at grokking*: ``max LLC over [t_mem_noisy, t_gen] - LLC(2 t_gen, or the last) > 2 SE``.

An estimate flagged ``nan`` or ``diverged`` counts as neither. **Answer**: "yes" if both hold in
at least 2 of the 3 seeds, "no" if either holds in at most 1 (`answer`).

The records, under ``results/llc/reading-a/``: ``seed_N/llc.csv`` (the `evolve` table of seed N:
one row a chain and checkpoint, with the estimate and its standard error), ``seed_N/run/`` (the
run's compact record: config, every evaluation, summary) and ``calibration/``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from interp.dissect.llc_figures import checkpoint_frame
from interp.metrics import milestones
from interp.store.run_folder import read_metrics
from tasks import ModAddTask

if TYPE_CHECKING:
    import plotly.graph_objects as go

ROOT = Path(__file__).resolve().parents[3]
RECORDS = ROOT / "results" / "llc" / "reading-a"
"""The reading's committed records: ``seed_N/llc.csv``, ``seed_N/run/`` and ``calibration/``."""

DENSE_UNTIL = 1000
"""Every checkpoint up to this step is read; after it, `LATE` log-spaced ones."""
LATE = 30
"""Log-spaced steps from `DENSE_UNTIL` to the last checkpoint, each read at its nearest checkpoint."""
START = 10
"""The step the rise is measured from (the first checkpoint after initialisation)."""
UNUSABLE = frozenset({"nan", "diverged"})
"""Flags that keep an estimate from counting as a rise or a fall."""


def reading_steps(steps: Sequence[int]) -> list[int]:
    """The checkpoints the reading reads: every one up to `DENSE_UNTIL`, then the one nearest
    each of `LATE` log-spaced steps from `DENSE_UNTIL` to the last.

    Args:
        steps: A run's checkpoint steps.

    Returns:
        The chosen steps, sorted, each once.
    """
    steps = sorted(steps)
    late = [s for s in steps if s > DENSE_UNTIL]
    picked = {s for s in steps if s <= DENSE_UNTIL}
    if late:
        picked |= {min(late, key=lambda s: abs(s - t)) for t in np.geomspace(DENSE_UNTIL, late[-1], LATE)}
    return sorted(picked)


def _at(curve: pd.DataFrame, step: int) -> pd.Series:
    """The row of the checkpoint nearest `step`."""
    return curve.loc[(curve["step"] - step).abs().idxmin()]


def _usable(*rows: pd.Series) -> bool:
    return not any(UNUSABLE & set(row["flags"].split(",")) for row in rows)


def seed_reading(table: pd.DataFrame, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rules on one seed.

    Args:
        table: The seed's `evolve` llc table (columns ``step``, ``estimate``, ``se``, ``flags``;
            a row a chain).
        records: The run's metrics records, in step order.

    Returns:
        ``t_mem_noisy`` and ``t_gen`` (None if never reached), the LLC and SE at each of the
        rules' checkpoints, ``rise`` and ``fall`` (the differences), their ``2 SE``, whether each
        holds (``rises``, ``falls``; False when a time is missing or an estimate unusable), and
        the ``flags`` of the estimates used.
    """
    times = milestones(records, ModAddTask.milestones)
    t_mem, t_gen = times["t_mem_noisy"]["step"], times["t_gen"]["step"]
    curve = checkpoint_frame(table)
    row: dict[str, Any] = {"t_mem_noisy": t_mem, "t_gen": t_gen}
    start = _at(curve, START)
    row |= {"start step": int(start["step"]), "llc (start)": start["estimate"]}
    rises = falls = False
    used = [start]
    if t_mem is not None:
        mem = _at(curve, t_mem)
        two_se = 2 * np.hypot(mem["se"], start["se"])
        row |= {
            "llc (t_mem_noisy)": mem["estimate"],
            "rise": mem["estimate"] - start["estimate"],
            "rise 2 SE": two_se,
        }
        rises = bool(row["rise"] > two_se) and _usable(start, mem)
        used.append(mem)
    if t_mem is not None and t_gen is not None:
        window = curve[(curve["step"] >= t_mem) & (curve["step"] <= t_gen)]
        peak = window.loc[window["estimate"].idxmax()] if len(window) else _at(curve, t_mem)
        after = curve[curve["step"] >= 2 * t_gen]
        end = _at(curve, 2 * t_gen) if len(after) else curve.iloc[-1]
        two_se = 2 * np.hypot(peak["se"], end["se"])
        row |= {
            "peak step": int(peak["step"]),
            "llc (peak)": peak["estimate"],
            "end step": int(end["step"]),
            "llc (end)": end["estimate"],
            "fall": peak["estimate"] - end["estimate"],
            "fall 2 SE": two_se,
        }
        falls = bool(row["fall"] > two_se) and _usable(peak, end)
        used += [peak, end]
    flags = sorted({f for r in used for f in r["flags"].split(",") if f})
    return row | {"rises": rises, "falls": falls, "flags": ",".join(flags)}


def reading_a(records: str | Path = RECORDS) -> pd.DataFrame:
    """Every committed seed's reading: one row a seed (``seed`` and `seed_reading`'s columns)."""
    rows = []
    for folder in sorted(Path(records).glob("seed_*"), key=lambda p: int(p.name.split("_")[1])):
        if (folder / "llc.csv").is_file():
            table = pd.read_csv(folder / "llc.csv")
            rows.append(
                {"seed": int(folder.name.split("_")[1])} | seed_reading(table, read_metrics(folder / "run"))
            )
    return pd.DataFrame(rows)


def _decide(rises: Sequence[bool], falls: Sequence[bool]) -> str:
    """The rule on a full set of seeds."""
    if sum(r and f for r, f in zip(rises, falls)) >= 2:
        return "yes"
    if sum(rises) <= 1 or sum(falls) <= 1:
        return "no"
    return "undecided"


def answer(table: pd.DataFrame, seeds: int = 3) -> str:
    """The preregistered answer over the seeds' readings.

    "yes" if the rise and the fall both hold in at least 2 of the `seeds` seeds; "no" if either
    holds in at most 1; "undecided" in the one case neither covers (each holds in 2 or more seeds,
    but both together in at most 1). Before every seed is read, the answer is given once no
    outcome of the seeds still to come can change it (two seeds without a fall already make it
    "no"), and "incomplete" until then.
    """
    rises, falls = list(map(bool, table["rises"])), list(map(bool, table["falls"]))
    missing = seeds - len(rises)
    outcomes = {
        _decide(rises + [r for r, _ in rest], falls + [f for _, f in rest])
        for rest in itertools.product(itertools.product((False, True), repeat=2), repeat=missing)
    }
    return outcomes.pop() if len(outcomes) == 1 else "incomplete"


def headline(table: pd.DataFrame, seeds: int = 3) -> str:
    """Reading (a)'s answer in one sentence (Markdown), for the top of its page: the
    preregistered `answer` and, seed by seed, whether the rise and the fall held.

    Args:
        table: `reading_a`.
        seeds: The seeds preregistered.
    """
    if table.empty:
        return f"no seed's curve has landed yet (0 of {seeds}): nothing about the answer is known."
    per_seed = "; ".join(
        f"seed {r.seed}: {'a rise' if r.rises else 'no rise'}, {'a fall' if r.falls else 'no fall'}"
        for r in table.itertuples()
    )
    said = answer(table, seeds)
    early = ", enough to decide" if len(table) < seeds and said != "incomplete" else ""
    return f"**{said}** ({len(table)} of {seeds} seeds read{early}; {per_seed})."


def reading_a_figure(records: str | Path = RECORDS) -> go.Figure:
    """Each seed's LLC over steps (a log axis; the chains' standard error as bars) above its
    corrupted-train and test accuracies, with ``t_mem_noisy`` (orange, dashed) and ``t_gen``
    (green, dashed) marked on both panels.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.06)
    colors = ("#1f77b4", "#9467bd", "#8c564b")
    for i, folder in enumerate(sorted(Path(records).glob("seed_*"))):
        if not (folder / "llc.csv").is_file():
            continue
        color, name = colors[i % len(colors)], folder.name.replace("_", " ")
        curve = checkpoint_frame(pd.read_csv(folder / "llc.csv"))
        curve = curve[curve["step"] > 0]  # a log axis has no step 0
        fig.add_trace(
            go.Scatter(
                x=curve["step"], y=curve["estimate"], error_y={"array": curve["se"], "thickness": 1},
                mode="lines+markers", marker={"size": 4}, line={"color": color}, name=name, legendgroup=name,
                hovertemplate="step %{x}<br>LLC %{y:.4g}<extra>" + name + "</extra>",
            ),
            row=1, col=1,
        )  # fmt: skip
        metrics = pd.DataFrame(read_metrics(folder / "run"))
        metrics = metrics[metrics["step"] > 0]
        for key, dash in (("train/corrupted/acc", "dot"), ("test/acc", "solid")):
            fig.add_trace(
                go.Scatter(
                    x=metrics["step"], y=metrics[key], mode="lines", line={"color": color, "dash": dash},
                    name=f"{name}: {key}", legendgroup=name, showlegend=False,
                ),
                row=2, col=1,
            )  # fmt: skip
        times = milestones(metrics.to_dict("records"), ModAddTask.milestones)
        for key, line in (("t_mem_noisy", "orange"), ("t_gen", "green")):
            if (step := times[key]["step"]) is not None:
                for row in (1, 2):
                    fig.add_vline(x=step, line={"color": line, "dash": "dash", "width": 1}, row=row, col=1)
    fig.update_xaxes(type="log")
    fig.update_xaxes(title_text="step (orange: t_mem_noisy; green: t_gen)", row=2, col=1)
    fig.update_yaxes(title_text="LLC (whole model)", row=1, col=1)
    fig.update_yaxes(
        title_text="accuracy (dotted: corrupted train; solid: test)", range=[0, 1.02], row=2, col=1
    )
    return fig.update_layout(height=640, margin={"t": 30}, legend={"orientation": "h", "y": 1.06})
