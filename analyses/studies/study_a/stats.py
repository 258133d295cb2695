"""Study A's preregistered statistics: one outcome per run, the two contrast tests, the vocabulary map.

Preregistered in `docs/study_a.md` ("Confirmation at CPU scale") before any of its runs:

* **One outcome per run** (`outcome`), the first that applies: *rule kept*, *rule transient*,
  *memorised without the rule*, *inverted shortcut* (final val accuracy <= 0.1 and adv >= 0.9),
  *shortcut only* (final val >= 0.9 and adv <= 0.1), *other*. A run that reaches the rule has
  usually memorised as well, so the milestones overlap and the outcomes do not.
* **The tests** (`contrast_tests`): the rule rate at r = 0.9 against r = 0.5, one-sided Fisher
  exact (`scipy.stats.fisher_exact`): *greater* for two-layer models (the primary test), *less*
  for one-layer ones (the secondary, the one-layer reversal); each with Newcombe's hybrid score
  interval for the difference of the two rates.
* **The map** (`axis_rates`, `axis_rate_figure`): a milestone's rate along a numeric coordinate
  (the vocabulary), one line per remaining configuration; and its decision rule
  (`headline_vocabulary`): the headline's vocabulary V* is the one with the largest difference
  of rule rates, r = 0.9 minus r = 0.5, ties to the larger vocabulary.

Everything reads `RunState`s (`analyses.report.records.load_results`), so committed records
rebuild every number from a fresh clone. Rates are over finished runs, as in the rate table.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from scipy.stats import fisher_exact

from analyses.report.records import DIVERGED, FINISHED, RunState, config_label, configurations, wilson

OUTCOMES = (
    "rule kept",
    "rule transient",
    "memorised without the rule",
    "inverted shortcut",
    "shortcut only",
    "other",
)
"""The exclusive outcomes of a study-A run, in the order they are tested."""

# The preregistered direction of each model's contrast (rule rate at r = 0.9 vs r = 0.5):
# two layers should gain from imbalance (the primary test), one layer lose (the secondary).
PREREGISTERED = {"mpsp-2l2h": ("greater", "primary"), "mpsp-1l1h": ("less", "secondary")}
HIGH_R, LOW_R = 0.9, 0.5
PREREGISTERED_SWEEPS = {
    "headline": "headline",
    "wd-headline": "weight-decay headline",
    "replication": "replication",
}
"""The results folders (under `results/study-a/`) whose contrasts are preregistered tests, and
each one's name; the same contrast in any other folder (the map, ...) is exploratory."""


def outcome(run: RunState) -> str:
    """The exclusive outcome of a study-A run (`OUTCOMES`), from its milestones and final accuracies."""
    rule = run.milestones.get("rule", {})
    if rule.get("step") is not None:
        return "rule kept" if rule.get("kept") else "rule transient"
    if run.milestones.get("memorized", {}).get("step") is not None:
        return "memorised without the rule"
    val, adv = run.final.get("val/acc"), run.final.get("adv/acc")
    if val is None or adv is None:
        return "other"
    if val <= 0.1 and adv >= 0.9:
        return "inverted shortcut"
    if val >= 0.9 and adv <= 0.1:
        return "shortcut only"
    return "other"


def outcome_table(runs: list[RunState]) -> pd.DataFrame:
    """Per configuration (sweep and coordinates but the seed): how many finished runs ended in each outcome."""
    rows = []
    for (sweep, *coords), group in configurations(runs).items():
        finished = [r for r in group if r.status == FINISHED]
        counts = {name: 0 for name in OUTCOMES}
        for run in finished:
            counts[outcome(run)] += 1
        rows.append(
            {"sweep": sweep, "configuration": config_label(dict(coords)), "finished": len(finished)} | counts
        )
    return pd.DataFrame(rows)


def newcombe(k1: int, n1: int, k2: int, n2: int, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval for the difference of two proportions ``k1/n1 - k2/n2``.

    Method 10 of Newcombe (1998), built from the two Wilson intervals (`report.wilson`, scipy's):
    ``d - sqrt((p1 - l1)^2 + (u2 - p2)^2)`` to ``d + sqrt((u1 - p1)^2 + (p2 - l2)^2)``.
    """
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1, confidence), wilson(k2, n2, confidence)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


@dataclass(frozen=True)
class Contrast:
    """A milestone's rate at r = 0.9 against r = 0.5 for one model, in the preregistered direction.

    It is a preregistered test only in a preregistered sweep (`PREREGISTERED_SWEEPS`) and on the
    study's 100% rule; the 99% variant there is its robustness reading, and the same contrast
    elsewhere (the vocabulary map, ...) is exploratory (`reading`). `high` and `low` count finished
    runs; `unfinished` the two cells' runs still training or not started, which mark a
    preregistered reading *incomplete* (its p is not the test's until they have finished).
    """

    sweep: str
    configuration: str
    role: str
    alternative: str
    milestone: str
    high: tuple[int, int]
    low: tuple[int, int]
    p_value: float
    difference: float
    ci_low: float
    ci_high: float
    unfinished: int = 0

    @property
    def reading(self) -> str:
        """'preregistered test', '99% variant (robustness)' or 'exploratory contrast'; the first
        two end in ', incomplete (N unfinished)' while the cells still have runs to finish.
        """
        if self.sweep not in PREREGISTERED_SWEEPS:
            return "exploratory contrast"
        reading = "preregistered test" if self.milestone == "rule" else "99% variant (robustness)"
        return reading + (f", incomplete ({self.unfinished} unfinished)" if self.unfinished else "")

    def row(self) -> dict[str, Any]:
        """A flat row for tables and CSV files."""
        (k1, n1), (k2, n2) = self.high, self.low
        return {
            "sweep": self.sweep,
            "configuration": self.configuration,
            "reading": self.reading,
            # An exploratory contrast is no test: its direction is the alternative's column.
            "test": "-" if self.reading == "exploratory contrast" else self.role,
            "milestone": self.milestone,
            f"r = {HIGH_R}": f"{k1}/{n1}",
            f"r = {LOW_R}": f"{k2}/{n2}",
            "alternative": f"rate at r = {HIGH_R} {'>' if self.alternative == 'greater' else '<'} r = {LOW_R}",
            "p (one-sided Fisher)": self.p_value,
            "difference": self.difference,
            "95% CI low (Newcombe)": self.ci_low,
            "95% CI high (Newcombe)": self.ci_high,
        }


def contrast_tests(runs: list[RunState], milestone: str = "rule") -> list[Contrast]:
    """The contrast in its preregistered direction wherever a results folder has a model's
    r = 0.9 and r = 0.5 cells (a preregistered test or an exploratory contrast: `Contrast.reading`).

    Cells pair up when they share the sweep and every coordinate but ``r`` (and the seed); only
    presets with a preregistered direction (`PREREGISTERED`) are tested, over finished runs.
    """
    cells: dict[tuple, dict[float, list[RunState]]] = defaultdict(dict)
    for (sweep, *coords), group in configurations(runs).items():
        config = dict(coords)
        r = config.pop("r", None)
        if r in (HIGH_R, LOW_R) and config.get("preset") in PREREGISTERED:
            cells[(sweep, *config.items())][r] = group
    tests = []
    for (sweep, *coords), every in cells.items():
        by_r = {r: [g for g in group if g.status == FINISHED] for r, group in every.items()}
        if set(by_r) != {HIGH_R, LOW_R} or not by_r[HIGH_R] or not by_r[LOW_R]:
            continue
        unfinished = sum(g.status not in (FINISHED, DIVERGED) for group in every.values() for g in group)
        config = dict(coords)
        alternative, role = PREREGISTERED[config["preset"]]
        k1, n1 = _reached(by_r[HIGH_R], milestone), len(by_r[HIGH_R])
        k2, n2 = _reached(by_r[LOW_R], milestone), len(by_r[LOW_R])
        p = fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative=alternative).pvalue
        low, high = newcombe(k1, n1, k2, n2)
        label = config_label(config)
        tests.append(
            Contrast(
                sweep,
                label,
                role,
                alternative,
                milestone,
                (k1, n1),
                (k2, n2),
                float(p),
                k1 / n1 - k2 / n2,
                low,
                high,
                unfinished,
            )
        )
    return tests


def report_tests(runs: list[RunState]) -> list[Contrast]:
    """Every contrast the report lists: each sweep's on the rule, then the preregistered sweeps'
    99% variants (their robustness reading), in that order.
    """
    robust = [t for t in contrast_tests(runs, "rule-99") if t.sweep in PREREGISTERED_SWEEPS]
    return contrast_tests(runs) + robust


def _reached(group: list[RunState], milestone: str) -> int:
    return sum(r.milestones.get(milestone, {}).get("step") is not None for r in group)


def axis_rates(runs: list[RunState], axis: str, milestone: str = "rule") -> pd.DataFrame:
    """A milestone's rate (finished runs, Wilson 95%) along the numeric coordinate `axis`.

    One row per configuration that has `axis` among its coordinates, with ``line`` naming the
    configuration without `axis` (the curve it belongs to).
    """
    rows = []
    for (sweep, *coords), group in configurations(runs).items():
        config = dict(coords)
        if axis not in config:
            continue
        value = config.pop(axis)
        finished = [r for r in group if r.status == FINISHED]
        k, n = _reached(finished, milestone), len(finished)
        low, high = wilson(k, n) if n else (None, None)
        rows.append(
            {
                "sweep": sweep,
                "line": config_label(config),
                axis: value,
                "reached": k,
                "finished": n,
                "rate": k / n if n else None,
                "ci_low": low,
                "ci_high": high,
            }
        )
    return pd.DataFrame(rows)


def headline_vocabulary(runs: list[RunState], milestone: str = "rule") -> tuple[int, pd.DataFrame]:
    """The map's preregistered decision: V*, the vocabulary with the largest rate difference.

    The difference is the `milestone` rate at r = 0.9 minus at r = 0.5 over each vocabulary's
    runs; ties go to the larger vocabulary. It picks a vocabulary whatever the differences are
    (if none is positive, where the contrast is least absent).

    Returns:
        V* and one row per vocabulary (the two rates as ``k/n`` and the difference).

    Raises:
        ValueError: If a run is not finished (the rule is decided on the complete map), or a
            vocabulary lacks one of the two ratios.
    """
    if unfinished := [r for r in runs if r.status != FINISHED]:
        raise ValueError(f"the map is not complete: {len(unfinished)} of {len(runs)} runs not finished")
    counts: dict[int, dict[float, tuple[int, int]]] = defaultdict(dict)
    for (_, *coords), group in configurations(runs).items():
        config = dict(coords)
        counts[config["vocab"]][config["r"]] = (_reached(group, milestone), len(group))
    rows = []
    for vocab, by_r in sorted(counts.items()):
        if set(by_r) != {HIGH_R, LOW_R}:
            raise ValueError(f"vocab {vocab} has r = {sorted(by_r)}; the rule needs {HIGH_R} and {LOW_R}")
        (k_high, n_high), (k_low, n_low) = by_r[HIGH_R], by_r[LOW_R]
        rows.append(
            {
                "vocab": vocab,
                f"r = {HIGH_R}": f"{k_high}/{n_high}",
                f"r = {LOW_R}": f"{k_low}/{n_low}",
                "difference": k_high / n_high - k_low / n_low,
            }
        )
    table = pd.DataFrame(rows)
    best = table["difference"].max()
    return int(table.loc[table["difference"] == best, "vocab"].max()), table


def axis_rate_figure(runs: list[RunState], axis: str = "vocab", milestone: str = "rule") -> go.Figure:
    """The map: `milestone` rate (%) against `axis`, one line per configuration, Wilson 95% error bars."""
    table = axis_rates(runs, axis, milestone)
    fig = go.Figure()
    for line, rows in table.groupby("line", sort=False) if len(table) else []:
        rows = rows[rows["finished"] > 0].sort_values(axis)
        rate = 100 * rows["rate"]
        fig.add_scatter(
            x=rows[axis],
            y=rate,
            mode="lines+markers",
            name=line,
            error_y={
                "type": "data",
                "symmetric": False,
                "array": 100 * rows["ci_high"] - rate,
                "arrayminus": rate - 100 * rows["ci_low"],
            },
            customdata=rows[["reached", "finished"]].to_numpy(),
            hovertemplate=f"{line}<br>{axis} %{{x}}: {milestone} in %{{customdata[0]}} of "
            "%{customdata[1]} runs = %{y:.0f}%<extra></extra>",
        )
    values = sorted(table[axis].unique()) if len(table) else []
    fig.update_xaxes(title_text=axis, tickvals=values)
    fig.update_yaxes(title_text=f"runs that reached the {milestone} (%)", range=[-5, 105])
    fig.update_layout(
        title=f"{milestone.capitalize()} rate against {axis} (finished runs; bars: Wilson 95% intervals)",
        height=420,
        legend={"title": {"text": "configuration"}},
    )
    return fig


def crossed_shares(runs: list[RunState], milestone: str = "rule") -> pd.DataFrame:
    """In a crossed design (tags ``data`` and ``seed``): how much of the milestone's variation each factor explains.

    For the 0/1 indicator "reached `milestone`" over the finished runs of one configuration, the
    sums of squares of a two-way layout without interaction: between data seeds
    (``n_model * sum_d (mean_d - mean)^2``), between model seeds (likewise), as shares of the
    total; the rest is what neither factor explains alone (their interaction: a training set
    and an initialisation that succeed only together). Exact shares need a complete design; a
    configuration missing any run gets None.

    Beside each share, how surprising it is (exploratory: the preregistration asked for the
    shares only): the exact permutation p-value, the fraction of all ways of placing the same
    number of successes on the design's cells whose share is at least as large (`_share_p`).

    Returns:
        One row per configuration with the counts, the grand rate, the two shares and their p-values.
    """
    cells: dict[tuple, list[RunState]] = defaultdict(list)
    for run in runs:
        if "data" in run.spec.tags:
            cells[(run.sweep, *((k, v) for k, v in run.config.items() if k != "data"))].append(run)
    rows = []
    for (sweep, *coords), group in cells.items():
        finished = [r for r in group if r.status == FINISHED]
        if not finished:
            continue
        y = {(r.spec.tags["data"], r.spec.tags["seed"]): float(_reached([r], milestone)) for r in finished}
        datas, seeds = sorted({d for d, _ in y}), sorted({s for _, s in y})
        complete = len(y) == len(datas) * len(seeds) == len(group)
        shares: tuple[float | None, float | None] = (None, None)
        p_values: tuple[float | None, float | None] = (None, None)
        if complete and 0 < sum(y.values()) < len(y):
            grid = [[y[d, s] for s in seeds] for d in datas]
            shares = _shares(grid)
            p_values = _share_p(grid, shares)
        rows.append(
            {
                "sweep": sweep,
                "configuration": config_label(dict(coords)),
                "data seeds": len(datas),
                "model seeds": len(seeds),
                "runs": len(y),
                "rate": sum(y.values()) / len(y),
                "share: data": shares[0],
                "share: initialisation": shares[1],
                "p: data": p_values[0],
                "p: initialisation": p_values[1],
            }
        )
    return pd.DataFrame(rows)


def _shares(grid: list[list[float]]) -> tuple[float, float]:
    """Shares of the total sum of squares of `grid` ``[data][seed]`` between rows and between columns."""
    n_data, n_seed = len(grid), len(grid[0])
    values = [v for row in grid for v in row]
    mean = sum(values) / len(values)
    total = sum((v - mean) ** 2 for v in values)
    by_data = [sum(row) / n_seed for row in grid]
    by_seed = [sum(row[j] for row in grid) / n_data for j in range(n_seed)]
    return (
        n_seed * sum((m - mean) ** 2 for m in by_data) / total,
        n_data * sum((m - mean) ** 2 for m in by_seed) / total,
    )


def _share_p(
    grid: list[list[float]], observed: tuple[float, float], limit: int = 200_000
) -> tuple[float | None, float | None]:
    """Exact permutation p-values of the two shares: over every placement of the same number of
    successes on the cells (all equally likely when neither factor matters), the fraction whose
    share is at least the observed one. None when there are more than `limit` placements.
    """
    n_data, n_seed = len(grid), len(grid[0])
    cells, successes = n_data * n_seed, int(sum(v for row in grid for v in row))
    if math.comb(cells, successes) > limit:
        return None, None
    at_least = [0, 0]
    for ones in itertools.combinations(range(cells), successes):
        flat = [0.0] * cells
        for i in ones:
            flat[i] = 1.0
        shares = _shares([flat[d * n_seed : (d + 1) * n_seed] for d in range(n_data)])
        for k in (0, 1):
            at_least[k] += shares[k] >= observed[k] - 1e-12  # the observed placement counts itself
    total = math.comb(cells, successes)
    return at_least[0] / total, at_least[1] / total


def crossed_outcomes(runs: list[RunState]) -> pd.DataFrame:
    """A crossed design's runs as a grid: one row per training set (tag ``data``), one column per
    initialisation (tag ``seed``), each cell the run's outcome (`outcome`), or "not finished" for a
    run still training or not started. Only runs tagged with both are shown (one grid per configuration:
    give one configuration's runs).
    """
    cells = {
        (run.spec.tags["data"], run.spec.tags["seed"]): outcome(run)
        if run.status == FINISHED
        else "not finished"
        for run in runs
        if "data" in run.spec.tags
    }
    table = pd.Series(cells, dtype=object).unstack() if cells else pd.DataFrame()
    table.index.name, table.columns.name = "training set", "initialisation"
    return table
