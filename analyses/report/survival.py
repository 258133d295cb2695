"""Time to a milestone over seeds: the fraction of runs that have reached it by epoch t.

A rate at one epoch depends on where training stopped; the curve does not. Runs that stopped
before reaching a milestone (unfinished, or finished without it) are *censored* at their last
evaluated epoch: they count as "not yet" up to there and drop out after. The curve is the
Kaplan-Meier estimate of the fraction reached, `F(t) = 1 - prod_{t_j <= t} (1 - d_j / n_j)`
(`d_j` runs reach the milestone at epoch `t_j`, `n_j` are still observed and have not reached
it just before). With no censoring before `t`, `F(t)` is the plain fraction `k / N`.

Bands are pointwise Wilson 95% intervals of `F(t)` over the runs still observed at `t` (those
not censored before it): exactly the Wilson interval of `k / N` where nothing was censored, and
wider where runs dropped out. `interp report` draws one curve per configuration for every
milestone of its runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
from scipy.stats import norm

from analyses.report.plots import StepAxis
from analyses.report.records import DIVERGED, FINISHED, UNFINISHED, RunState, config_label, configurations


@dataclass(frozen=True)
class TimeToMilestone:
    """The fraction of a configuration's runs that reached a milestone by each epoch.

    Attributes:
        milestone: The milestone's name.
        steps: The epochs at which the curve changes (0 first, then each event or censoring).
        fraction: Kaplan-Meier estimate of the fraction reached by each of `steps`.
        low: Lower end of the pointwise Wilson 95% band.
        high: Upper end of the band.
        observed: Runs still observed (not censored before) at each of `steps`.
        runs: Runs in the configuration that have been evaluated at least once.
        reached: Runs that reached the milestone.
    """

    milestone: str
    steps: list[int]
    fraction: list[float]
    low: list[float]
    high: list[float]
    observed: list[int]
    runs: int
    reached: int


def wilson_interval(fraction: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion `fraction` observed over `n` (not necessarily whole) trials.

    The closed form, because a Kaplan-Meier fraction over runs still observed is not a whole
    count (scipy's `binomtest(...).proportion_ci` agrees on whole counts; a test checks it).
    """
    if n <= 0:
        return 0.0, 1.0
    z = norm.ppf(0.5 + confidence / 2)
    centre = (fraction + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(fraction * (1 - fraction) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def time_to_milestone(group: list[RunState], milestone: str) -> TimeToMilestone:
    """The time-to-`milestone` curve of one configuration's runs.

    Args:
        group: The runs of one configuration (finished, unfinished or diverged; runs never
            evaluated are left out).
        milestone: A milestone name in the runs' `milestones`.

    Returns:
        The curve, with its pointwise Wilson bands.
    """
    events: list[tuple[int, bool]] = []  # (epoch, reached) per run
    for run in group:
        if run.status not in (FINISHED, UNFINISHED, DIVERGED) or run.epoch is None:
            continue
        step = run.milestones.get(milestone, {}).get("step")
        events.append((step, True) if step is not None else (run.epoch, False))
    steps, fraction, low, high, observed = [0], [0.0], [0.0], [1.0], [len(events)]
    survival, at_risk, censored = 1.0, len(events), 0
    for epoch in sorted({e for e, _ in events}):
        reached = sum(1 for e, hit in events if e == epoch and hit)
        dropped = sum(1 for e, hit in events if e == epoch and not hit)
        if reached:
            survival *= 1 - reached / at_risk
        # Runs censored at this epoch were observed through it: they leave the band's count after it.
        n_obs = len(events) - censored
        f = 1 - survival
        lo, hi = wilson_interval(f, n_obs)
        steps.append(epoch), fraction.append(f), low.append(lo), high.append(hi), observed.append(n_obs)
        at_risk -= reached + dropped
        censored += dropped
    total = sum(hit for _, hit in events)
    low[0], high[0] = wilson_interval(0.0, len(events))
    return TimeToMilestone(milestone, steps, fraction, low, high, observed, len(events), total)


def time_to_milestone_figure(runs: list[RunState], milestones: list[str] | None = None) -> go.Figure:
    """One time-to-milestone curve per configuration (step lines, shaded Wilson bands).

    With several milestones a menu switches between them; the first shown is ``rule`` when the
    runs have it (study A's true rule), else the first milestone. The epoch axis is linear: the
    curves are read as "by epoch t, this share of seeds".

    Args:
        runs: Every run of a results folder.
        milestones: Which milestones to offer (default: every milestone of the runs).
    """
    groups = configurations(runs)
    names = milestones or list(dict.fromkeys(n for r in runs for n in r.milestones))
    first = "rule" if "rule" in names else (names[0] if names else "")
    several_sweeps = len({key[0] for key in groups}) > 1
    axis = StepAxis([0] + [r.epoch for r in runs if r.epoch is not None], log=False)
    fig = go.Figure()
    owners: list[str] = []
    for index, (key, group) in enumerate(groups.items()):
        label = (f"{key[0]}: " if several_sweeps else "") + config_label(dict(key[1:]))
        for name in names:
            curve = time_to_milestone(group, name)
            if curve.runs:
                _add_curve(fig, curve, label, _palette(index), visible=name == first)
                owners += [name] * 3
    if len(names) > 1:
        buttons = [
            {
                "label": name,
                "method": "update",
                "args": [{"visible": [o == name for o in owners]}, {"title.text": _title(name)}],
            }
            for name in names
        ]
        # Above the legend, clear of the title and the plot.
        menu = {
            "buttons": buttons,
            "x": 1.02,
            "xanchor": "left",
            "y": 1.12,
            "yanchor": "bottom",
            "active": names.index(first),
        }
        fig.update_layout(updatemenus=[menu])
    fig.update_xaxes(**axis.layout())
    fig.update_yaxes(title_text="runs that reached it (%)", range=[-2, 102])
    fig.update_layout(
        title=_title(first),
        height=440,
        margin={"t": 90, "b": 50},
        legend={"title": {"text": "configuration (reached/runs)"}},
    )
    return fig


def _add_curve(fig: go.Figure, curve: TimeToMilestone, label: str, colour: str, *, visible: bool) -> None:
    """The band (two invisible edges, filled between) and the step line of one curve."""
    common = {"x": curve.steps, "visible": visible, "legendgroup": label, "showlegend": False}
    edge = {"mode": "lines", "line": {"width": 0, "shape": "hv"}, "hoverinfo": "skip"}
    fig.add_scatter(**common, **edge, y=[100 * v for v in curve.high])
    fig.add_scatter(
        **common, **edge, y=[100 * v for v in curve.low], fill="tonexty", fillcolor=_translucent(colour)
    )
    fig.add_scatter(
        x=curve.steps,
        y=[100 * v for v in curve.fraction],
        visible=visible,
        legendgroup=label,
        mode="lines",
        line={"shape": "hv", "color": colour, "width": 2},
        name=f"{label} ({curve.reached}/{curve.runs})",
        customdata=[[o, 100 * lo, 100 * hi] for o, lo, hi in zip(curve.observed, curve.low, curve.high)],
        hovertemplate=f"{label}<br>{curve.milestone} by epoch %{{x:,}}: %{{y:.0f}}%"
        "<br>95% band [%{customdata[1]:.0f}%, %{customdata[2]:.0f}%] over "
        "%{customdata[0]} runs observed<extra></extra>",
    )


def _title(name: str) -> str:
    return (
        f"Time to {name}: runs that reached it by each epoch<br><sup>Kaplan-Meier, runs that "
        "stopped without it censored; bands: pointwise Wilson 95%</sup>"
    )


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _palette(index: int) -> str:
    return _COLOURS[index % len(_COLOURS)]


def _translucent(colour: str, alpha: float = 0.08) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r}, {g}, {b}, {alpha})"
