"""The figure of `interp.stages.boundaries.Stages`: every series on one step axis, with the
boundaries drawn across all panels, so the LLC and circuit measures line up by checkpoint.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from interp.stages.boundaries import Stages


def stages_figure(stages: Stages, log_x: bool = False) -> go.Figure:
    """One panel per column over steps; the smoothed curve dashed (``"llc"``); boundaries as
    vertical lines labelled by kind; stages shaded alternately. On a log axis, step 0 is left out
    and shapes take log10 coordinates.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    n = len(stages.columns)
    fig = make_subplots(
        rows=n, cols=1, shared_xaxes=True, subplot_titles=stages.columns, vertical_spacing=0.06
    )
    keep = [i for i, s in enumerate(stages.steps) if not (log_x and s <= 0)]
    x = [stages.steps[i] for i in keep]
    for row, column in enumerate(stages.columns, start=1):
        y = [stages.values[column][i] for i in keep]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers",
                name=column,
                hovertemplate="step %{x}<br>%{y:.4g}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        if stages.smoothed is not None and row == 1:
            fig.add_trace(
                go.Scatter(
                    x=x, y=[stages.smoothed[i] for i in keep], mode="lines", name=f"{column} (smoothed)",
                    line={"dash": "dash"},
                ),
                row=1, col=1,
            )  # fmt: skip
    coord = (lambda s: math.log10(s)) if log_x else (lambda s: s)
    starts = [s for s, _ in stages.segments]
    ends = [e for _, e in stages.segments]
    for i, (s, e) in enumerate(zip(starts, ends)):
        if i % 2 and not (log_x and s <= 0):
            fig.add_vrect(
                x0=coord(s), x1=coord(e), fillcolor="grey", opacity=0.12, line_width=0, row="all", col=1
            )
    for i, (step, kind) in enumerate(zip(stages.boundaries, stages.kinds)):
        if log_x and step <= 0:
            continue
        fig.add_vline(x=coord(step), line_dash="dot", line_color="red", row="all", col=1)
        # Labels upright and staggered over three heights, so close boundaries stay readable.
        fig.add_annotation(
            x=coord(step), y=1.0 + 0.035 * (i % 3), yref="paper", text=f"{kind} {step}", showarrow=False,
            font={"size": 10, "color": "red"}, textangle=0,
        )  # fmt: skip
    fig.update_xaxes(title_text="step", type="log" if log_x else "linear", row=n, col=1)
    fig.update_layout(
        title=f"Stages by {stages.method}: boundaries at {', '.join(map(str, stages.boundaries)) or 'none'}",
        height=250 + 220 * n,
        hovermode="x unified",
    )
    return fig
