"""The ``circuit`` analysis's figure: the edge graph with positions, and the faithfulness curves.

Nodes sit at x = their stage in the forward pass (embeddings, then per layer the heads' q/k/v
inputs, the heads' outputs, the MLP; the logits last) and y = their position, spread a little
around it so heads and their inputs do not overlap. Edges are lines whose width grows with
``|score|`` (in a few width bins: one plotly trace per bin), kept edges in colour, the others grey;
a marker at each edge's middle carries its hover (edge and its three scores). Below the graphs,
each pairing's faithfulness curve over circuit size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from analyses.circuit import CircuitResult

WIDTH_BINS = 6
KEPT, OTHER = "firebrick", "rgba(150, 150, 150, 0.35)"


def node_xy(name: str, pos: int, n_heads: int, n_layers: int) -> tuple[float, float]:
    """Where a node (upstream ``embed``/``L0H1``/``MLP0`` or receiver ``L1H0.q``/``logits``) is drawn."""
    spread = 0.6 / max(n_heads, 1)
    if name in ("embed", "pos_embed"):
        return 0.0, pos + (-0.25 if name == "embed" else 0.25)
    if name == "logits":
        return 1.0 + 3 * n_layers, float(pos)
    if name.startswith("MLP"):
        return 3.0 + 3 * int(name[3:]), float(pos)
    layer, rest = name[1:].split("H")
    head, _, kind = rest.partition(".")
    y = pos + (int(head) - (n_heads - 1) / 2) * spread
    if kind:  # an input: q, k, v stacked just around the head's row
        return 1.0 + 3 * int(layer), y + {"q": -0.08, "k": 0.0, "v": 0.08}[kind]
    return 2.0 + 3 * int(layer), y


def _describe(name: str, pos: int) -> str:
    """Hover text of a node: its name, layer, head and position."""
    if name in ("embed", "pos_embed"):
        layer, head = "-", "-"
    elif name == "logits":
        layer, head = "out", "-"
    elif name.startswith("MLP"):
        layer, head = name[3:], "-"
    else:
        layer, rest = name[1:].split("H")
        head = rest.split(".")[0]
    return f"node {name}<br>layer {layer}<br>head {head}<br>position {pos}"


def _nodes(result: CircuitResult) -> go.Scatter:
    names = sorted({(n, p) for n, p in zip(result.edge_upstream, result.edge_pos)})
    names += sorted({(n, p) for n, p in zip(result.edge_receiver, result.edge_pos)})
    xy = [node_xy(n, p, result.n_heads, result.n_layers) for n, p in names]
    return go.Scatter(
        x=[x for x, _ in xy],
        y=[y for _, y in xy],
        mode="markers",
        marker={"size": 7, "color": "black"},
        text=[_describe(n, p) for n, p in names],
        hovertemplate="%{text}<extra></extra>",
        showlegend=False,
    )


def _edge_traces(result: CircuitResult, i: int, show_legend: bool) -> list[go.Scatter]:
    method = result.params.get("method", "exact")
    scores = getattr(result, method)[i].abs().numpy()
    top = scores.max() if scores.size and scores.max() > 0 else 1.0
    bins = np.minimum((scores / top * WIDTH_BINS).astype(int), WIDTH_BINS - 1)
    kept = result.kept[i].numpy() > 0
    ends = [
        (node_xy(u, p, result.n_heads, result.n_layers), node_xy(r, p, result.n_heads, result.n_layers))
        for u, r, p in zip(result.edge_upstream, result.edge_receiver, result.edge_pos)
    ]
    traces = []
    for is_kept in (False, True):
        named = False  # one legend entry per kind, not one per width bin
        for b in range(WIDTH_BINS):
            chosen = np.flatnonzero((bins == b) & (kept == is_kept))
            if not len(chosen):
                continue
            xs: list[Any] = []
            ys: list[Any] = []
            for e in chosen:
                (x0, y0), (x1, y1) = ends[e]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
            traces.append(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"width": 0.5 + 1.5 * b, "color": KEPT if is_kept else OTHER},
                    hoverinfo="skip",
                    name="kept edge" if is_kept else "other edge",
                    legendgroup="kept" if is_kept else "other",
                    showlegend=show_legend and not named,
                )
            )
            named = True
    text = [
        f"edge {u}->{r} @ position {p}<br>exact {result.exact[i, e]:.4f}<br>EAP {result.eap[i, e]:.4f}"
        f"<br>EAP-IG {result.eap_ig[i, e]:.4f}<br>{'kept' if kept[e] else 'not kept'}"
        for e, (u, r, p) in enumerate(zip(result.edge_upstream, result.edge_receiver, result.edge_pos))
    ]
    traces.append(
        go.Scatter(
            x=[(a[0] + b[0]) / 2 for a, b in ends],
            y=[(a[1] + b[1]) / 2 for a, b in ends],
            mode="markers",
            marker={"size": 4, "color": np.where(kept, KEPT, "rgba(120,120,120,0.5)").tolist()},
            text=text,
            hovertemplate="%{text}<extra></extra>",
            showlegend=False,
        )
    )
    return traces


def _stage_ticks(n_layers: int) -> tuple[list[float], list[str]]:
    ticks, labels = [0.0], ["embed"]
    for layer in range(n_layers):
        ticks += [1.0 + 3 * layer, 2.0 + 3 * layer, 3.0 + 3 * layer]
        labels += [f"L{layer} q/k/v in", f"L{layer} heads", f"MLP{layer}"]
    return [*ticks, 1.0 + 3 * n_layers], [*labels, "logits"]


def graph_figure(result: CircuitResult) -> go.Figure:
    """One graph per pairing above the faithfulness curves (see the module docstring)."""
    n = len(result.flips)
    titles = [
        f"{flip}-flip pairs ({result.n_pairs[flip]})<br>circuit of {int(result.kept[i].sum())} edges"
        for i, flip in enumerate(result.flips)
    ]
    fig = make_subplots(
        rows=2, cols=n, row_heights=[0.72, 0.28], subplot_titles=[*titles, *["faithfulness"] * n]
    )
    ticks, labels = _stage_ticks(result.n_layers)
    # Faithfulness ticks at 1-2-5 steps: plotly labels every minor tick of a short log axis (8 9 1 2 3 ...).
    largest = max(result.curve_sizes, default=1)
    sizes = [v * 10**e for e in range(4) for v in (1, 2, 5) if v * 10**e <= largest]
    for i, flip in enumerate(result.flips):
        for trace in _edge_traces(result, i, show_legend=i == 0):
            fig.add_trace(trace, row=1, col=i + 1)
        fig.add_trace(_nodes(result), row=1, col=i + 1)
        fig.update_xaxes(tickvals=ticks, ticktext=labels, row=1, col=i + 1)
        fig.update_yaxes(title_text="position", dtick=1, row=1, col=i + 1)
        faith = result.curve_faithfulness[i].tolist()
        fig.add_trace(
            go.Scatter(
                x=result.curve_sizes,
                y=faith,
                mode="lines+markers",
                name=f"{flip} faithfulness",
                hovertemplate="circuit of %{x} edges<br>faithfulness %{y:.3f}<extra></extra>",
            ),
            row=2,
            col=i + 1,
        )
        fig.update_xaxes(title_text="circuit size (edges)", type="log", tickvals=sizes, row=2, col=i + 1)
        fig.update_yaxes(title_text="faithfulness", row=2, col=i + 1)
    step = f", step {result.step}" if result.step is not None else ""
    method = result.params.get("method", "exact")
    fig.update_layout(
        title=f"Edge circuit on {result.split}{step}: width = |{method} score|, kept edges in red",
        height=420 + 60 * result.n_pos,
        margin={"t": 140},
    )
    note = result.undefined_note()
    if note:  # under the title, above the panels' own titles (it overlapped them at y = 1)
        fig.add_annotation(
            text=note,
            xref="paper",
            yref="paper",
            x=0.5,
            y=1.0,
            yshift=50,
            yanchor="bottom",
            showarrow=False,
            font={"color": "firebrick"},
        )
    return fig


def circuit_over_training(evolution: Any, flip: str = "label", phase_step: int | None = None) -> go.Figure:
    """Which edges enter and leave the circuit across checkpoints (`analyses.evolution.evolve` of ``circuit``).

    Rows are the edges kept at any checkpoint (by the step they first enter), columns the
    checkpoints, one equal-width column each (a series is dense around a phase transition and
    log-spaced elsewhere, so a step axis would squeeze most columns to slivers; the ticks name
    the steps); colour is the edge's ``|score|`` (of the analysis's ``method``), a dot marks the
    checkpoints where the circuit keeps it.

    Args:
        evolution: An `Evolution` of the ``circuit`` analysis.
        flip: The pairing to show (``label`` or ``shortcut``).
        phase_step: A step to mark with a vertical line (e.g. a phase detector's onset), placed
            between the checkpoints around it in proportion to its step.
    """
    steps, results = list(evolution.steps), evolution.results
    method = results[0].params.get("method", "exact")
    edges = [
        f"{u}->{r}@{p}"
        for u, r, p in zip(results[0].edge_upstream, results[0].edge_receiver, results[0].edge_pos)
    ]
    rows = [r.flips.index(flip) for r in results]
    kept = np.stack([r.kept[i].numpy() > 0 for r, i in zip(results, rows)], axis=1)  # [edge, step]
    score = np.stack([getattr(r, method)[i].abs().numpy() for r, i in zip(results, rows)], axis=1)
    ever = np.flatnonzero(kept.any(axis=1))
    ever = ever[np.argsort(kept[ever].argmax(axis=1), kind="stable")]  # by first entry
    labels = [edges[e] for e in ever]
    columns = list(range(len(steps)))
    fig = go.Figure(
        go.Heatmap(
            z=score[ever].tolist(),
            x=columns,
            y=labels,
            customdata=[steps] * len(labels),
            colorscale="Blues",
            colorbar={"title": f"|{method}|"},
            hovertemplate="edge %{y}<br>step %{customdata}<br>|score| %{z:.4f}<extra></extra>",
        )
    )
    dots = np.argwhere(kept[ever])
    fig.add_trace(
        go.Scatter(
            x=[columns[j] for _, j in dots],
            y=[labels[i] for i, _ in dots],
            mode="markers",
            marker={"color": KEPT, "size": 6},
            name="in the circuit",
            hoverinfo="skip",
        )
    )
    if phase_step is not None:
        fig.add_vline(
            x=float(np.interp(phase_step, steps, columns)), line_dash="dash", annotation_text="phase 2"
        )
    every = max(1, len(steps) // 20)  # at most ~20 tick labels
    fig.update_layout(
        title=f"Circuit over training ({flip}-flip pairs): edges kept at any checkpoint",
        xaxis={
            "title": "checkpoint (step)",
            "tickmode": "array",
            "tickvals": columns[::every],
            "ticktext": [str(s) for s in steps[::every]],
        },
        yaxis={"autorange": "reversed", "type": "category"},
        height=300 + 14 * len(labels),
    )
    return fig
