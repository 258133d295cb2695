"""Study A's circuit-evolution figure and checkpoint explorer for one run.

The figure puts on one epoch axis what SCIENCE.md says shows the mechanism: accuracy on
train / val / adv; gradient conflict (cosine of the consistent and opposing gradients) and
amplification relative to the stationary-point value r/(1-r); and per head the QK
magnitude-sorting rho, the OV parity rho and the attention to position 0. The detected phase-2
onset (adv accuracy clearly above chance while val accuracy stays >= 99%) is marked.

The explorer is one plotly figure with a slider over checkpoints: each head's mean attention
from the readout position to every key position on the adv split, with that checkpoint's
fingerprints in the title. Both work in a notebook and as static HTML files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from analyses import get_analysis
from analyses.evolution import Evolution, evolve
from analyses.subject import load_subject
from interp.dissect.heads import readout_patterns
from interp.store import checkpoint_dir, list_checkpoints
from interp.store.run_folder import read_config

SPLIT_COLOURS = {"train": "#636efa", "val": "#00cc96", "adv": "#ef553b"}


def phase2_onset(
    metrics: Sequence[dict[str, Any]], chance: float, margin: float = 0.15, val_threshold: float = 0.99
) -> int | None:
    """First evaluated epoch where adv accuracy exceeds chance + `margin` while val accuracy
    is at least `val_threshold` (the true rule appearing beside a kept shortcut), or None.
    """
    for record in metrics:
        if record.get("adv/acc", 0.0) >= chance + margin and record.get("val/acc", 0.0) >= val_threshold:
            return record["step"]
    return None


def evolutions(
    run_dir: str | Path, *, progress: bool = False, cache: str | Path | None = None
) -> tuple[Evolution, Evolution]:
    """The fingerprint and gradient-group evolutions of a run (cached per checkpoint)."""
    fingerprint, grads = get_analysis("fingerprint"), get_analysis("grads")
    fp = evolve(run_dir, fingerprint, fingerprint.params(split="adv"), progress=progress, cache=cache)
    gr = evolve(run_dir, grads, grads.params(split="train"), progress=progress, cache=cache)
    return fp, gr


def circuit_evolution_figure(
    run_dir: str | Path, *, log_x: bool = True, progress: bool = False, cache: str | Path | None = None
) -> go.Figure:
    """Study A's circuit-evolution figure of a run (see the module docstring); `cache` as in `evolve`."""
    run_dir = Path(run_dir)
    fp, gr = evolutions(run_dir, progress=progress, cache=cache)
    n_classes = read_config(run_dir)["model"]["d_vocab_out"]
    titles = (
        "accuracy",
        "gradient conflict and amplification",
        "QK magnitude-sorting rho (weights)",
        "OV parity rho",
        "attention to position 0",
    )
    fig = make_subplots(rows=5, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.05)
    steps = [r["step"] for r in fp.metrics]
    for split, colour in SPLIT_COLOURS.items():
        fig.add_trace(
            go.Scatter(
                x=steps,
                y=[r.get(f"{split}/acc") for r in fp.metrics],
                name=f"{split} acc",
                line={"color": colour},
                hovertemplate=f"{split}<br>epoch %{{x}}<br>acc %{{y:.3f}}",
            ),
            row=1,
            col=1,
        )
    _add_gradients(fig, gr)
    for row, measure in ((3, "qk_rho_weights"), (4, "ov_parity_rho"), (5, "attn_pos0")):
        _add_heads(fig, fp, measure, row)
    onset = phase2_onset(fp.metrics, chance=1 / n_classes)
    if onset is not None:
        fig.add_vline(
            x=max(onset, 1) if log_x else onset, line_dash="dot", annotation_text=f"phase 2 @ {onset}"
        )
    fig.update_xaxes(type="log" if log_x else "linear", title_text="epoch", row=5, col=1)
    fig.update_layout(height=1100, title=f"Circuit evolution: {run_dir}", hovermode="x unified")
    return fig


def _add_gradients(fig: go.Figure, gr: Evolution) -> None:
    total = [r.to_frame().iloc[0] for r in gr.results]  # row 0 is the total over all parameters
    fig.add_trace(
        go.Scatter(
            x=gr.steps,
            y=[t["cos"] for t in total],
            name="cos(g_c, g_o)",
            hovertemplate="epoch %{x}<br>cosine %{y:.3f}",
        ),
        row=2,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=gr.steps,
            y=[t["amp_weighted"] for t in total],
            name="amplification / (r/(1-r))",
            hovertemplate="epoch %{x}<br>|g_o|/|g_c| relative to r/(1-r): %{y:.3f}",
        ),
        row=2,
        col=1,
    )


def _add_heads(fig: go.Figure, fp: Evolution, measure: str, row: int) -> None:
    first = getattr(fp.results[0], measure)
    for layer in range(first.shape[0]):
        for head in range(first.shape[1]):
            values = [float(getattr(r, measure)[layer, head]) for r in fp.results]
            fig.add_trace(
                go.Scatter(
                    x=fp.steps,
                    y=values,
                    name=f"L{layer}H{head} {measure}",
                    legendgroup=f"L{layer}H{head}",
                    hovertemplate=f"layer {layer} head {head}<br>epoch %{{x}}<br>{measure} %{{y:.3f}}",
                ),
                row=row,
                col=1,
            )


@torch.no_grad()
def attention_explorer(
    run_dir: str | Path, split: str = "adv", max_examples: int = 1024, *, cache: str | Path | None = None
) -> go.Figure:
    """A slider over checkpoints: mean readout attention per head and key position on `split`."""
    run_dir = Path(run_dir)
    fp, _ = evolutions(run_dir, cache=cache)
    fingerprints = dict(zip(fp.steps, fp.results))
    frames, labels = [], []
    for step in list_checkpoints(run_dir):
        subject = load_subject(checkpoint_dir(run_dir, step))
        tokens = subject.split(split).tokens[:max_examples]
        mean = readout_patterns(subject.model, tokens).mean(0)  # [n_layers, n_heads, pos]
        n_layers, n_heads, n_pos = mean.shape
        labels = [f"L{layer}H{head}" for layer in range(n_layers) for head in range(n_heads)]
        frames.append(
            go.Frame(
                name=str(step),
                data=[
                    go.Heatmap(
                        z=mean.reshape(-1, n_pos).tolist(),
                        x=[f"pos {p}" for p in range(n_pos)],
                        y=labels,
                        zmin=0,
                        zmax=1,
                        colorscale="Blues",
                        hovertemplate="%{y} -> %{x}<br>attention %{z:.3f}<extra></extra>",
                    )
                ],
                layout={"title": {"text": f"epoch {step}: " + _fingerprint_line(fingerprints[step])}},
            )
        )
    fig = go.Figure(data=frames[0].data, frames=frames)
    steps = [
        {
            "args": [[f.name], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate"}],
            "label": f.name,
            "method": "animate",
        }
        for f in frames
    ]
    fig.update_layout(
        title=frames[0].layout.title.text,
        sliders=[{"steps": steps, "currentvalue": {"prefix": "epoch "}}],
        xaxis_title=f"key position (mean readout attention on {split})",
        yaxis_title="layer / head",
    )
    return fig


def _fingerprint_line(result: Any) -> str:
    frame = result.to_frame()
    return "  ".join(
        f"L{r.layer}H{r.head}: QK {r.qk_rho_weights:+.2f} OV {r.ov_parity_rho:+.2f} pos0 {r.attn_pos0:.2f}"
        for r in frame.itertuples()
    )
