"""Study C's figures: times vs xi (log y), final accuracies vs xi, training curves per xi (mean
over seeds), the weight-decay regimes (corrupted-example accuracy against corrupted and true
labels, and test accuracy, over training), and the IPR evolution of one seed per xi.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analyses.studies.study_c.tables import FINALS, REFERENCE, TIMES, regime
from interp.metrics import evaluate
from interp.splits import Split
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.run_folder import read_metrics


def times_figure(runs: pd.DataFrame, table: pd.DataFrame) -> go.Figure:
    """The three times against xi (log y): mean with 95% t-interval, each seed, and the reference."""
    fig = go.Figure()
    colors = dict(zip(TIMES, ("#1f77b4", "#ff7f0e", "#2ca02c")))
    done = runs[runs["done"]]
    for i, name in enumerate(TIMES):
        offset = (i - 1) * 0.006  # keep the three series apart at each xi
        mean = table[f"{name} mean"]
        fig.add_scatter(
            x=table["xi"] + offset,
            y=mean,
            name=f"{name} (mean, 95% CI)",
            mode="lines+markers",
            line_color=colors[name],
            error_y={
                "type": "data",
                "symmetric": False,
                "array": (table[f"{name} high"] - mean).tolist(),
                "arrayminus": (mean - table[f"{name} low"]).tolist(),
            },
            hovertemplate=f"{name}<br>xi %{{x:.2f}}<br>mean step %{{y:.0f}}<extra></extra>",
        )
        fig.add_scatter(
            x=done["xi"] + offset,
            y=done[name],
            name=f"{name} (each seed)",
            mode="markers",
            marker={"color": colors[name], "symbol": "circle-open"},
            customdata=done["seed"],
            hovertemplate=f"{name}<br>xi %{{x:.2f}}, seed %{{customdata}}<br>step %{{y}}<extra></extra>",
        )
    ref = [(xi, r["t_gen"]) for xi, r in REFERENCE.items() if r["t_gen"] is not None]
    fig.add_scatter(
        x=[x for x, _ in ref],
        y=[y for _, y in ref],
        name="t_gen, reference (eval every 100)",
        mode="markers",
        marker={"symbol": "x", "size": 10, "color": "black"},
    )
    fig.update_layout(
        title="Study C: times to memorise and to generalise vs label noise xi (first step at >= 99%)",
        xaxis_title="label-noise fraction xi",
        yaxis={"type": "log", "title": "step"},
    )
    return fig


def final_accuracy_figure(runs: pd.DataFrame) -> go.Figure:
    """Final accuracies against xi: mean over finished seeds, each seed, and the reference test accuracy."""
    done = runs[runs["done"]]
    fig = go.Figure()
    for key, label in FINALS.items():
        means = done.groupby("xi")[f"final {key}"].mean()
        fig.add_scatter(x=means.index, y=means.values, name=f"{label} (mean)", mode="lines+markers")
        fig.add_scatter(
            x=done["xi"],
            y=done[f"final {key}"],
            name=f"{label} (each seed)",
            mode="markers",
            marker={"symbol": "circle-open"},
            customdata=done["seed"],
            hovertemplate=f"{label}<br>xi %{{x}}, seed %{{customdata}}<br>acc %{{y:.4f}}<extra></extra>",
        )
    fig.add_scatter(
        x=list(REFERENCE),
        y=[r["test_acc"] / 100 for r in REFERENCE.values()],
        name="test, reference",
        mode="markers",
        marker={"symbol": "x", "size": 10, "color": "black"},
    )
    fig.update_layout(
        title="Study C: final accuracies vs label noise xi",
        xaxis_title="label-noise fraction xi",
        yaxis_title="accuracy (corrupted examples scored against their corrupted labels)",
    )
    return fig


def curves_figure(runs: pd.DataFrame) -> go.Figure:
    """Training curves per xi (mean over the given runs at each evaluated step), one panel per metric."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=list(FINALS.values()), shared_yaxes=True)
    palette = ["#440154", "#443983", "#31688e", "#21918c", "#35b779", "#90d743", "#fde725"]
    for i, (xi, group) in enumerate(runs.groupby("xi", sort=True)):
        frames = [pd.DataFrame(read_metrics(r)) for r in group["run"] if (Path(r) / "metrics.jsonl").exists()]
        if not frames:
            continue
        mean = pd.concat(frames).groupby("step").mean(numeric_only=True)
        x = np.maximum(mean.index.to_numpy(), 1)
        for col, key in enumerate(FINALS, start=1):
            if key in mean:
                fig.add_scatter(
                    x=x,
                    y=mean[key],
                    name=f"xi = {xi:g} ({len(frames)} seeds)",
                    legendgroup=str(xi),
                    showlegend=col == 1,
                    line_color=palette[i % len(palette)],
                    row=1,
                    col=col,
                    hovertemplate=f"xi {xi:g}<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
                )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_yaxes(title_text="accuracy (mean over seeds)", col=1)
    fig.update_layout(title="Study C: training curves per label-noise level", height=420)
    return fig


def inversion_curve(run_dir: str | Path) -> pd.DataFrame:
    """Accuracy of the corrupted train examples against their *true* labels at every checkpoint."""
    from analyses.subject import load_subject

    rows = []
    for step in list_checkpoints(run_dir):
        subject = load_subject(checkpoint_dir(run_dir, step))
        train = subject.splits["train"]
        mask = train.groups["corrupted"]
        true = Split("true", train.tokens[mask], train.extras["true_labels"][mask])
        rows.append(
            {
                "step": step,
                "corrupted true-label acc": evaluate(subject.model.readout, {"true": true}, subject.loss)[
                    "true/acc"
                ],
            }
        )
    return pd.DataFrame(rows)


def wd_figure(wd_runs: pd.DataFrame, inversions: dict[str, pd.DataFrame] | None = None) -> go.Figure:
    """Weight-decay regimes at fixed xi: corrupted-example accuracy (corrupted and true labels) and test accuracy."""
    wd_runs = wd_runs.sort_values("weight_decay")
    rows = [row for _, row in wd_runs.iterrows()]
    titles = [
        f"wd {row['weight_decay']:g}: "
        + (regime(row["final test/acc"], row["final train/corrupted/acc"]) if row["done"] else "running")
        for row in rows
    ]
    fig = make_subplots(rows=1, cols=max(1, len(rows)), subplot_titles=titles, shared_yaxes=True)
    styles = {
        "train/corrupted/acc": ("corrupted examples, corrupted labels", "#d62728"),
        "test/acc": ("test", "#2ca02c"),
        "train/clean/acc": ("clean train", "#1f77b4"),
    }
    for col, row in enumerate(rows, start=1):
        metrics = pd.DataFrame(read_metrics(row["run"]))
        x = np.maximum(metrics["step"].to_numpy(), 1)
        wd = row["weight_decay"]
        for key, (label, color) in styles.items():
            fig.add_scatter(
                x=x,
                y=metrics[key],
                name=label,
                line_color=color,
                legendgroup=key,
                showlegend=col == 1,
                row=1,
                col=col,
                hovertemplate=f"wd {wd:g}<br>{label}<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
            )
        inv = (inversions or {}).get(row["run"])
        if inv is not None and len(inv):
            fig.add_scatter(
                x=np.maximum(inv["step"], 1),
                y=inv["corrupted true-label acc"],
                mode="markers+lines",
                name="corrupted examples, true labels",
                line={"color": "#9467bd", "dash": "dot"},
                legendgroup="true",
                showlegend=col == 1,
                row=1,
                col=col,
                hovertemplate=f"wd {wd:g}<br>corrupted, true labels<br>step %{{x}}<br>acc %{{y:.3f}}<extra></extra>",
            )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_yaxes(title_text="accuracy", col=1)
    xi = wd_runs["xi"].iloc[0] if len(wd_runs) else "?"
    fig.update_layout(title=f"Study C: weight-decay regimes at xi = {xi}", height=420)
    return fig


def ipr_evolution_figure(runs: pd.DataFrame, seed: int = 0) -> go.Figure:
    """Per xi (one seed): median neuron IPR and the share of neurons with IPR > 0.5, over checkpoints.

    Uses (and caches in each run folder) the registered `ipr` analysis at every checkpoint,
    the same as ``interp evolve --run RUN --analysis ipr``.
    """
    from analyses import get_analysis
    from analyses.evolution import evolve

    analysis = get_analysis("ipr")
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["median neuron IPR", "share of neurons with IPR > 0.5"]
    )
    palette = ["#440154", "#443983", "#31688e", "#21918c", "#35b779", "#90d743", "#fde725"]
    chosen = runs[(runs["seed"] == seed) & runs["run"].map(lambda r: bool(list_checkpoints(r)))]
    for i, row in enumerate(chosen.sort_values("xi").itertuples()):
        frame = evolve(row.run, analysis, analysis.params(), progress=False).to_frame()
        by_step = frame.groupby("step")["ipr"]
        x = np.maximum(by_step.median().index.to_numpy(), 1)
        for col, values in ((1, by_step.median()), (2, by_step.apply(lambda v: float((v > 0.5).mean())))):
            fig.add_scatter(
                x=x,
                y=values.values,
                name=f"xi = {row.xi:g}",
                legendgroup=str(row.xi),
                showlegend=col == 1,
                line_color=palette[i % len(palette)],
                row=1,
                col=col,
                hovertemplate=f"xi {row.xi:g}<br>step %{{x}}<br>%{{y:.3f}}<extra></extra>",
            )
    fig.update_xaxes(type="log", title_text="step")
    fig.update_layout(title=f"Study C: per-neuron Fourier IPR over training (seed {seed})", height=420)
    return fig
