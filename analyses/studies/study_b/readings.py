"""Study B's readings beside the preregistered rule, from the exported records (no weights).

Added after protocol 6's results (issue 47), and labelled so wherever they are quoted:

* `forgetting_avoided`: the share of AdamW's forgetting that the WLMD sample avoided, per seed
  ``(W - A) / (1 - A)`` (W, A: test accuracy after injection), with a Student-t interval over
  the seeds. The rule reads the raw difference ``W - A`` against the study's gap of 0.2, but
  that gap cannot exceed ``1 - A``: AdamW models that keep more than 0.8 make "contradicted as
  stated" unavoidable whatever the samples do. The share has no such ceiling; the study's own
  figures (AdamW below 0.75, WLMD about 0.95) imply about 0.8 (`STUDY_SHARE`).
* `walk_facts`: what each walk's records say about how far it was from converged (the final
  ``ln f``, the steps of its halvings, how much ``S`` still changed in its last stage, whether
  the cosine to its start was still falling).
* `injection_facts`: what the injections did besides the accuracy (steps to the target, the
  cosine before/after).
* `used_rank_summary`: the used and raw effective ranks of every model (``used_ranks.csv``,
  written by ``scripts/long_runs/study_b_models.py ranks``), averaged over the seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from analyses.report.stats import t_interval
from analyses.studies.study_b.tables import read_frame

STUDY_ADAMW, STUDY_WLMD = 0.75, 0.95  # the study's random-noise figures (below 0.75; about 0.95)
STUDY_SHARE = (STUDY_WLMD - STUDY_ADAMW) / (1 - STUDY_ADAMW)  # the share they imply: 0.8
RUNS_FILE, WALK_FILE, USED_RANKS_FILE = "study_b_runs.csv", "walk.json", "used_ranks.csv"
RECORDS = Path(__file__).resolve().parents[3] / "results" / "study-b" / "protocol-6"  # the reported protocol


def forgetting_avoided(dest: str | Path, noise: str = "random", confidence: float = 0.95) -> pd.DataFrame:
    """Per seed, the share of its AdamW model's forgetting that its WLMD sample avoided.

    Args:
        dest: Exported records (``results/study-b/<protocol>``).
        noise: The noise type read.
        confidence: Of the interval (`summary_of_shares`).

    Returns:
        One row per seed with both models: ``seed``, ``adamw``, ``wlmd`` (test accuracy after
        injection), ``gap`` (``wlmd - adamw``), ``ceiling`` (``1 - adamw``, the largest gap
        possible) and ``share`` (``gap / ceiling``; NaN where AdamW forgot nothing).
    """
    runs = read_frame(Path(dest) / RUNS_FILE)
    acc = runs[runs["noise"] == noise].pivot_table(index="seed", columns="model", values="test_acc_after")
    acc = acc.dropna().reset_index()[["seed", "adamw", "wlmd"]]
    acc["gap"] = acc["wlmd"] - acc["adamw"]
    acc["ceiling"] = 1 - acc["adamw"]
    acc["share"] = acc["gap"] / acc["ceiling"].where(acc["ceiling"] > 0)
    return acc


def summary_of_shares(frame: pd.DataFrame, confidence: float = 0.95) -> dict[str, float]:
    """Mean share and its Student-t interval over the seeds of `forgetting_avoided`'s frame,
    with the largest mean gap the seeds allowed (``mean ceiling``) and the study's share.
    """
    mean, low, high = t_interval(frame["share"].dropna().tolist(), confidence)
    return {
        "seeds": int(frame["share"].notna().sum()),
        "mean": mean,
        "low": low,
        "high": high,
        "mean_ceiling": float(frame["ceiling"].mean()),
        "study": STUDY_SHARE,
    }


def walk_facts(dest: str | Path) -> pd.DataFrame:
    """Per seed, how far its walk was from converged, from its ``seed_N/walk.json``.

    Returns:
        One row per seed: ``final_ln_f``, ``halvings`` (the steps at which ``ln f`` changed),
        ``last_stage_steps`` (the steps between the last two halvings), ``stage_ln_f`` (the
        last stage's ``ln f``), ``S_change_median``,
        ``S_change_max`` (``S_change`` per record in that stage: the
        largest change of S's shape over the visited bins since the previous record),
        ``visited`` (bins visited in the last full record), ``y_min`` (the lowest y of the
        walker over the last stage), ``cosine_stage_start`` and ``cosine_end`` (the walker's
        cosine to its start when the last stage began and at the walk's end).
    """
    rows = []
    for walk in sorted(Path(dest).glob(f"seed_*/{WALK_FILE}")):
        records = json.loads(walk.read_text())
        changes = [i for i in range(1, len(records)) if records[i]["ln_f"] != records[i - 1]["ln_f"]]
        halvings = [records[i]["step"] for i in changes]
        stage = records[changes[-2] + 1 : changes[-1]] if len(changes) >= 2 else []
        s_change = pd.Series([r["S_change"] for r in stage if r["S_change"] is not None], dtype=float)
        rows.append(
            {
                "seed": int(walk.parent.name.split("_")[1]),
                "final_ln_f": records[-1]["ln_f"],
                "halvings": halvings,
                "last_stage_steps": halvings[-1] - halvings[-2] if len(halvings) >= 2 else None,
                "stage_ln_f": stage[0]["ln_f"] if stage else None,
                "S_change_median": s_change.median(),
                "S_change_max": s_change.max(),
                "visited": records[-2]["visited"],
                "y_min": min(min(r["y"]) for r in stage) if stage else None,
                "cosine_stage_start": stage[0]["cosine"][0] if stage else None,
                "cosine_end": records[-1]["cosine"][0],
            }
        )
    return pd.DataFrame(rows)


def injection_facts(dest: str | Path, noise: str = "random") -> dict[str, Any]:
    """Per model, over the seeds of `noise`'s injections: the steps to the accuracy target (min,
    max) and the mean cosine between the parameters before and after injection.
    """
    runs = read_frame(Path(dest) / RUNS_FILE)
    runs = runs[runs["noise"] == noise]
    return {
        model: {
            "steps_min": int(rows["steps"].min()),
            "steps_max": int(rows["steps"].max()),
            "cosine_mean": float(rows["cosine_before_after"].mean()),
            "reached": int(rows["reached"].sum()),
            "seeds": len(rows),
        }
        for model, rows in runs.groupby("model")
    }


def retention_figure(dest: str | Path) -> Any:
    """Test accuracy after injection, AdamW against WLMD, one line per seed, one panel per noise
    type, with the study's random-noise figures as dotted lines (a plotly figure).
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    runs = read_frame(Path(dest) / RUNS_FILE)
    noises = list(dict.fromkeys(runs["noise"]))
    fig = make_subplots(
        rows=1, cols=len(noises), shared_yaxes=True, subplot_titles=[f"{n} noise" for n in noises]
    )
    colours = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")
    for col, noise in enumerate(noises, 1):
        acc = runs[runs["noise"] == noise].pivot_table(index="seed", columns="model", values="test_acc_after")
        for seed, row in acc.iterrows():
            fig.add_trace(
                go.Scatter(
                    x=["AdamW", "WLMD"],
                    y=[row["adamw"], row["wlmd"]],
                    mode="lines+markers",
                    name=f"seed {seed}",
                    legendgroup=f"seed {seed}",
                    showlegend=col == 1,
                    line={"color": colours[int(seed) % len(colours)]},
                ),
                row=1,
                col=col,
            )
        if noise == "random":
            for value, label in ((STUDY_ADAMW, "study: AdamW below"), (STUDY_WLMD, "study: WLMD about")):
                fig.add_hline(y=value, line_dash="dot", annotation_text=f"{label} {value}", row=1, col=col)
    fig.update_yaxes(title_text="test accuracy after injection", row=1, col=1, range=[0.7, 1.0])
    fig.update_layout(height=420, title="Original task kept after injection (protocol 6, 3 seeds)")
    return fig


def used_rank_means(dest: str | Path) -> pd.DataFrame:
    """``used_ranks.csv``'s used rank, raw rank and share of the norm outside the read span,
    averaged over the seeds, per model and matrix (index ``(model, matrix)``).
    """
    ranks = read_frame(Path(dest) / USED_RANKS_FILE)
    return ranks.groupby(["model", "matrix"], sort=False)[["used", "raw", "outside_share"]].mean()


def used_rank_summary(dest: str | Path) -> pd.DataFrame:
    """`used_rank_means` as the docs' table: one row per model, per matrix ``used (raw)``."""
    means = used_rank_means(dest)
    cells = means.apply(lambda r: f"{r['used']:.1f} ({r['raw']:.1f})", axis=1).unstack("matrix")
    cells.index.name = cells.columns.name = None  # one header row: the matrices
    return cells[list(dict.fromkeys(means.index.get_level_values("matrix")))]
