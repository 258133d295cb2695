"""Study A's circuit-evolution figure and checkpoint explorer for one run.

The figure puts on one epoch axis what shows shortcut saturation (docs/study_a.md): accuracy
on train / val / adv; the gradient conflict (cosine of the consistent and opposing gradients)
and the amplification relative to its stationary-point value r/(1-r); and per head the QK
magnitude-sorting rho, the OV parity rho and the attention to position 0. Phase 2 (`phase2`:
the rise of the lower of val and adv accuracy to 100%, found by `interp.metrics.find_rise`) is
shaded from its onset to its end, the same epochs the explorer and the report mark. When the
run has an LLC evolve table, a last panel draws the LLC and its stage boundaries
(`analyses.studies.study_a.llc_stages`) through every panel.

The explorer is one plotly figure with a slider over checkpoints: each head's mean attention
from the readout position to every key position on the adv split, beside that checkpoint's
fingerprints. Both display in a notebook and write as static HTML (`plots.write_figure`); a
head has the same colour in both (`plots.head_colour`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analyses import get_analysis
from analyses.evolution import Evolution, evolve
from analyses.report.plots import StepAxis, add_step_marker, head_colour, head_label, split_colour
from analyses.studies.study_a.llc_stages import add_llc_panel, cached_llc
from analyses.subject import load_subject
from interp.dissect.heads import readout_patterns
from interp.metrics import Rise, find_rise
from interp.store import checkpoint_dir
from interp.store.run_folder import read_config
from tasks import MPSPTask

# (Fingerprint field, panel title, y axis title, y range) for the three per-head panels.
HEAD_PANELS = (
    ("qk_rho_weights", "QK magnitude sorting: Spearman rho of score vs key value (weights)", "rho", (-1, 1)),
    ("ov_parity_rho", "OV parity: rank-biserial rho of what the head writes vs token parity", "rho", (-1, 1)),
    ("attn_pos0", "attention from the readout to position 0 (adv split)", "weight", (0, 1)),
)
HEAD_MEASURES = {
    "qk_rho_weights": "QK rho",
    "ov_parity_rho": "OV parity rho",
    "attn_pos0": "attention to pos 0",
}
ROWS = 3 + len(HEAD_PANELS)


# Phase 2 is the rise of the *rule* milestone's measure: the lower of val and adv accuracy (an
# inverted shortcut alone puts adv at 100% on a binary label, with val at 0).
PHASE2_METRIC, PHASE2_TARGET = MPSPTask.milestones["rule"]
PHASE2_TOL = 0.05


def phase2(metrics: Sequence[dict[str, Any]], tol: float = PHASE2_TOL) -> Rise | None:
    """Study A's phase 2 in a run's metrics: the rise of min(val, adv accuracy) to 100%
    (`interp.metrics.find_rise` with tolerance `tol`: onset where it last sat within `tol` of its
    phase-1 plateau, end where it first reached 1 - `tol`), or None if it never rose.
    """
    return find_rise(metrics, PHASE2_METRIC, PHASE2_TARGET, tol=tol)


def phase2_label(rise: Rise | None) -> str:
    """How every figure names the phase: ``phase 2: epochs 400-620`` (or that there was none)."""
    if rise is None:
        return f"no phase 2 (min(val, adv) accuracy never reached {PHASE2_TARGET - PHASE2_TOL:.0%})"
    return f"phase 2: epochs {rise.onset:,}-{rise.end:,}"


def add_phase2_markers(
    fig: go.Figure, axis: StepAxis, metrics: Sequence[dict[str, Any]], *, rows: int = 1, label_y: float = 1.0
) -> Rise | None:
    """Dotted lines through every row at phase 2's onset and end (`phase2`), labelled in row 1."""
    rise = phase2(metrics)
    if rise is not None:
        add_step_marker(
            fig, axis, rise.onset, f"phase 2 onset, epoch {rise.onset:,}", rows=rows, label_y=label_y
        )
        add_step_marker(
            fig, axis, rise.end, f"phase 2 end, epoch {rise.end:,}", rows=rows, label_y=label_y - 0.1
        )
    return rise


def evolutions(
    run_dir: str | Path,
    *,
    progress: bool = False,
    cache: str | Path | None = None,
    checkpoints: str | Iterable[int] | None = None,
) -> tuple[Evolution, Evolution]:
    """The fingerprint and gradient-group evolutions of a run (cached per checkpoint; `cache` and
    `checkpoints` as in `evolve`: a cache elsewhere than the run folder, e.g. for a read-only
    run, and only some of its checkpoints).
    """
    return (
        _evolve(run_dir, "fingerprint", "adv", progress, cache, checkpoints),
        _evolve(run_dir, "grads", "train", progress, cache, checkpoints),
    )


def _evolve(
    run_dir: str | Path,
    name: str,
    split: str,
    progress: bool,
    cache: str | Path | None = None,
    checkpoints: str | Iterable[int] | None = None,
) -> Evolution:
    """The registered analysis `name` on `split` over the run's checkpoints (fingerprints on adv,
    gradient groups on train).
    """
    analysis = get_analysis(name)
    return evolve(
        run_dir,
        analysis,
        analysis.params(split=split),
        checkpoints=checkpoints,
        progress=progress,
        cache=cache,
    )


def run_title(run_dir: str | Path) -> str:
    """A short description of a run from its config: model, task ratio, seed and folder name."""
    config = read_config(run_dir)
    model, task, train = config["model"], config["task"], config["train"]
    parts = [f"{model.get('n_layers', '?')} layers x {model.get('n_heads', '?')} heads"]
    if "r" in task:
        parts.append(f"r = {task['r']}")
    parts.append(f"seed {train.get('seed', '?')}")
    return f"{', '.join(parts)} ({Path(run_dir).name})"


def circuit_evolution_figure(
    run_dir: str | Path,
    *,
    log_x: bool = True,
    progress: bool = False,
    cache: str | Path | None = None,
    checkpoints: str | Iterable[int] | None = None,
    llc: pd.DataFrame | None = None,
) -> go.Figure:
    """Study A's circuit-evolution figure of a run (see the module docstring).

    Every panel shares one step axis (log by default; step 0 drawn as "0"); phase 2 (`phase2`),
    if the run has one, is a dotted line through every panel at its onset and another at its
    end, labelled in the accuracy panel. The head and gradient panels use every checkpoint, or
    those `checkpoints` names (as in `evolve`); the accuracy panel every evaluation.

    With an LLC evolve table (`llc`: ``step``, ``llc``, ``se`` columns; by default the run's
    cached whole-model `llc` results, `llc_stages.cached_llc`), a last panel draws the LLC and
    its stage boundaries (`interp.stages`) are red lines through every panel.
    """
    run_dir = Path(run_dir)
    fp, gr = evolutions(run_dir, progress=progress, cache=cache, checkpoints=checkpoints)
    llc = cached_llc(run_dir, cache) if llc is None else llc
    rows = ROWS + (llc is not None)
    n_classes = read_config(run_dir)["model"]["d_vocab_out"]
    llc_steps = [] if llc is None else [int(s) for s in llc["step"]]
    axis = StepAxis([r["step"] for r in fp.metrics] + fp.steps + gr.steps + llc_steps, log=log_x)
    titles = (
        "accuracy per split",
        "gradient conflict: cos(g_consistent, g_opposing) on train",
        "amplification |g_opposing| / |g_consistent| relative to r/(1-r)",
        *(panel[1] for panel in HEAD_PANELS),
        *(
            ()
            if llc is None
            else ("local learning coefficient (± 2 se over chains) and its stage boundaries",)
        ),
    )
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.05)
    _add_accuracy(fig, fp.metrics, axis, chance=1 / n_classes)
    _add_gradients(fig, gr, axis)
    for offset, (measure, _, y_title, y_range) in enumerate(HEAD_PANELS):
        _add_heads(fig, fp, measure, 4 + offset, axis)
        fig.update_yaxes(title_text=y_title, range=[y_range[0] - 0.05, y_range[1] + 0.05], row=4 + offset)
    add_phase2_markers(fig, axis, fp.metrics, rows=rows)
    if llc is not None:
        add_llc_panel(fig, axis, llc, row=rows, rows=rows)
    # Tick labels on every panel (they are far apart), the axis title once at the bottom.
    fig.update_xaxes(**{**axis.layout(), "title_text": None}, showticklabels=True)
    fig.update_xaxes(title_text=axis.layout()["title_text"], row=rows)
    _place_legends(fig, llc_row=rows if llc is not None else None)
    fig.update_layout(
        height=1500 + 250 * (llc is not None),
        title=f"Circuit evolution: {run_title(run_dir)}",
        hovermode="closest",
        margin={"r": 170},
    )
    return fig


def _add_accuracy(fig: go.Figure, metrics: list[dict[str, Any]], axis: StepAxis, chance: float) -> None:
    records = [r for r in metrics if "train/acc" in r]
    steps = [r["step"] for r in records]
    for split in ("train", "val", "adv"):
        fig.add_trace(
            go.Scatter(
                **axis.trace(steps),
                y=[r.get(f"{split}/acc") for r in records],
                name=split,
                legend="legend",
                line={"color": split_colour(split)},
                hovertemplate=f"split {split}<br>epoch %{{customdata:,}}<br>accuracy %{{y:.3f}}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_hline(y=chance, line_dash="dash", line_color="#999", line_width=1, row=1, col=1)
    fig.update_yaxes(title_text="accuracy", range=[-0.02, 1.04], row=1)


def _add_gradients(fig: go.Figure, gr: Evolution, axis: StepAxis) -> None:
    total = [r.to_frame().iloc[0] for r in gr.results]  # row 0 is the total over all parameters
    cos = [float(t["cos"]) for t in total]
    ratio = [float(t["amp_weighted"]) for t in total]
    fig.add_trace(
        go.Scatter(
            **axis.trace(gr.steps),
            y=cos,
            name="cosine",
            legend="legend2",
            line={"color": "#444"},
            hovertemplate="train split, all parameters<br>epoch %{customdata:,}<br>cosine %{y:.3f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(title_text="cosine", range=[-1.05, 1.05], row=2)
    # A ratio of norms is positive; a log axis centres the stationary value 1 (NaN where undefined).
    log_ratio = all(v > 0 for v in ratio)
    fig.add_trace(
        go.Scatter(
            **axis.trace(gr.steps),
            y=ratio,
            name="ratio / (r/(1-r))",
            legend="legend2",
            line={"color": "#8c564b"},
            hovertemplate="train split, all parameters<br>epoch %{customdata:,}"
            "<br>|g_o|/|g_c| relative to r/(1-r): %{y:.3f}<extra></extra>",
        ),
        row=3,
        col=1,
    )
    fig.add_hline(y=1.0, line_dash="dash", line_color="#999", line_width=1, row=3, col=1)
    # The range in log10 units on a log axis (plotly's convention for ranges), around 1 and the data.
    finite = [v for v in ratio if math.isfinite(v)] + [1.0]
    ticks: dict[str, Any] = {}
    if log_ratio:
        low, high = math.log10(min(finite)), math.log10(max(finite))
        span = [min(low, -0.3) - 0.05, max(high, 0.3) + 0.05]
        values = [m * 10.0**d for d in range(-4, 5) for m in (1, 3)]
        ticks = {"tickvals": [v for v in values if span[0] <= math.log10(v) <= span[1]]}
    else:
        span = [min(0.0, min(finite)), max(finite) * 1.05]
    fig.update_yaxes(
        title_text="ratio (1 = stationary)", type="log" if log_ratio else "linear", range=span, row=3, **ticks
    )


def _add_heads(fig: go.Figure, fp: Evolution, measure: str, row: int, axis: StepAxis) -> None:
    first = getattr(fp.results[0], measure)
    n_layers, n_heads = first.shape
    for layer in range(n_layers):
        for head in range(n_heads):
            label = head_label(layer, head)
            fig.add_trace(
                go.Scatter(
                    **axis.trace(fp.steps),
                    y=[float(getattr(r, measure)[layer, head]) for r in fp.results],
                    name=label,
                    legend="legend3",
                    legendgroup=label,
                    showlegend=row == 4,  # one legend entry per head toggles it in every panel
                    line={"color": head_colour(layer, head, n_heads)},
                    hovertemplate=f"layer {layer}, head {head}<br>epoch %{{customdata:,}}"
                    f"<br>{HEAD_MEASURES[measure]} %{{y:.3f}}<extra></extra>",
                ),
                row=row,
                col=1,
            )


def _place_legends(fig: go.Figure, llc_row: int | None = None) -> None:
    """One legend per panel group, beside the top of its group: splits, gradients, heads (and the LLC)."""
    groups = [("legend", 1, "split"), ("legend2", 2, "gradients"), ("legend3", 4, "head")]
    for name, row, title in groups + ([("legend4", llc_row, "LLC")] if llc_row else []):
        top = fig.layout[f"yaxis{'' if row == 1 else row}"].domain[1]
        fig.update_layout(
            {name: {"x": 1.01, "xanchor": "left", "y": top, "yanchor": "top", "title": {"text": title}}}
        )


@torch.no_grad()
def attention_explorer(
    run_dir: str | Path,
    split: str = "adv",
    max_examples: int = 1024,
    *,
    cache: str | Path | None = None,
    checkpoints: str | Iterable[int] | None = None,
) -> go.Figure:
    """A slider over checkpoints (every one, or those `checkpoints` names as in `evolve`): mean
    readout attention per head and key position on `split`, beside each head's fingerprints at
    that checkpoint.
    """
    run_dir = Path(run_dir)
    fp = _evolve(run_dir, "fingerprint", "adv", False, cache, checkpoints)
    means = []
    for step in fp.steps:
        subject = load_subject(checkpoint_dir(run_dir, step))
        tokens = subject.split(split).tokens[:max_examples]
        means.append(readout_patterns(subject.model, tokens).mean(0))  # [n_layers, n_heads, pos]
    # One colour scale for every checkpoint, so frames compare; up to the largest mean weight.
    top = max(float(m.max()) for m in means)
    frames = [
        go.Frame(name=str(step), data=_explorer_traces(mean, result, split, step, top))
        for step, result, mean in zip(fp.steps, fp.results, means)
    ]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.55, 0.45],
        horizontal_spacing=_EXPLORER_GAP,
        subplot_titles=(f"mean attention from the readout on {split}", f"head fingerprints on {split}"),
    )
    for index, trace in enumerate(frames[0].data):
        fig.add_trace(trace, row=1, col=1 if index == 0 else 2)
    fig.frames = frames
    steps = [
        {
            "args": [[f.name], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate"}],
            "label": f"{int(f.name):,}",
            "method": "animate",
        }
        for f in frames
    ]
    fig.update_layout(
        title=f"Checkpoint explorer: {run_title(run_dir)}<br><sup>{phase2_label(phase2(fp.metrics))}</sup>",
        # The slider goes below the heatmap's rotated position labels and its axis title.
        sliders=[{"steps": steps, "currentvalue": {"prefix": "epoch "}, "pad": {"t": 95}}],
        barmode="group",
        legend={"title": {"text": "head"}, "x": 1.09},
        height=580,
    )
    fig.update_xaxes(title_text="key position", row=1, col=1)
    fig.update_yaxes(title_text="layer, head", autorange="reversed", row=1, col=1)
    # Its axis on the right: the gap between the panels holds the heatmap's colour bar.
    fig.update_yaxes(title_text="rho / attention weight", range=[-1.05, 1.05], side="right", row=1, col=2)
    return fig


# The explorer's two panels: the gap between them, and the heatmap's colour bar just right of
# the first panel (which ends at 0.55 of the width left after the gap).
_EXPLORER_GAP = 0.16
_EXPLORER_COLORBAR_X = 0.55 * (1 - _EXPLORER_GAP) + 0.012


def _explorer_traces(mean: torch.Tensor, fingerprint: Any, split: str, step: int, top: float) -> list[Any]:
    n_layers, n_heads, n_pos = mean.shape
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    traces: list[Any] = [
        go.Heatmap(
            z=mean.reshape(-1, n_pos).tolist(),
            x=[f"pos {p}" + (" (readout)" if p == n_pos - 1 else "") for p in range(n_pos)],
            y=[head_label(*h) for h in heads],
            zmin=0,
            zmax=top,
            colorscale="Viridis",
            colorbar={"title": {"text": "attention"}, "x": _EXPLORER_COLORBAR_X, "thickness": 14, "len": 0.9},
            hovertemplate=f"%{{y}} -> %{{x}}<br>split {split}, epoch {step:,}<br>attention %{{z:.3f}}<extra></extra>",
        )
    ]
    for layer, head in heads:
        label = head_label(layer, head)
        traces.append(
            go.Bar(
                x=list(HEAD_MEASURES.values()),
                y=[float(getattr(fingerprint, m)[layer, head]) for m in HEAD_MEASURES],
                name=label,
                marker_color=head_colour(layer, head, n_heads),
                hovertemplate=f"layer {layer}, head {head}<br>split {split}, epoch {step:,}"
                "<br>%{x}: %{y:.3f}<extra></extra>",
            )
        )
    return traces
