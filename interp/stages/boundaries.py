"""Stage boundaries in any series over checkpoints: an `evolve` table or a run's metrics.

Three rules, one function (`find_stages`), each returning the boundaries (the first step of
each new stage) and the segments between them:

* ``"llc"``: critical points and plateaus of a smoothed curve (Hoogland et al., TMLR 2025,
  "Loss landscape geometry reveals stagewise development of transformers", split training at
  the LLC's critical points). The curve is smoothed by a Gaussian of `smooth` evaluations, its
  slope taken against log10(step + 1) (checkpoints are log-spaced early) or, with
  ``slope="checkpoint"``, per checkpoint; a boundary is where the slope changes sign (a local
  maximum or minimum), or the middle of an interior plateau: at least `min_size` evaluations in
  a row whose slope is below `plateau_tol` times the largest. Against log-steps, a series that is
  dense late (checkpoints every 25 epochs around an onset at epoch 1,800) can have one slope so
  steep that every other counts as flat, and a curve flat everywhere has no boundary; a slope per
  checkpoint weighs every checkpoint alike, whatever its spacing.
* ``"changepoint"``: change points of one or more columns at once (each standardised), by
  `ruptures` (Truong, Oudre & Vayatis 2020): PELT with an L2 cost and penalty
  ``4 * k * sigma^2 * log T`` (k columns, T evaluations, sigma^2 the noise variance estimated
  from first differences by the median absolute deviation; 4, not BIC's 2: on pure Gaussian noise
  of 30-120 evaluations 2 found 0.12 false boundaries per series, 4 none in 120 series, and 4
  still found every 3-sigma step), or, given `n_boundaries`, the exact
  optimal segmentation with that many (dynamic programming).
* ``"rise"``: the onset and end of a metric's rise to `target`, by `interp.metrics.find_rise`
  unchanged (a preregistered onset rule may rest on it), so a boundary found by the other rules
  can be compared with the onset it reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from interp.errors import ConfigError, did_you_mean
from interp.metrics import find_rise

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

METHODS = ("llc", "changepoint", "rise")
SLOPES = ("log-step", "checkpoint")
PENALTY_FACTOR = 4.0


@dataclass(frozen=True)
class Stages:
    """Boundaries and the stages between them.

    Attributes:
        method: The rule (`METHODS`).
        columns: The columns the rule read.
        steps: The evaluated steps, increasing.
        values: Each column's series per step (the mean over rows of one step).
        boundaries: The first step of each new stage, increasing.
        kinds: What each boundary is: ``max``, ``min``, ``plateau``, ``change``, ``onset``, ``end``.
        smoothed: The smoothed curve (``"llc"`` only).
    """

    method: str
    columns: list[str]
    steps: list[int]
    values: dict[str, list[float]]
    boundaries: list[int]
    kinds: list[str]
    smoothed: list[float] | None = None

    @property
    def segments(self) -> list[tuple[int, int]]:
        """``(first step, last step)`` of each stage."""
        starts = [self.steps[0], *self.boundaries]
        ends = [self.steps[self.steps.index(b) - 1] for b in self.boundaries] + [self.steps[-1]]
        return list(zip(starts, ends))

    def to_frame(self) -> pd.DataFrame:
        """One row per stage: its number, first and last step, and the boundary that opens it."""
        import pandas as pd

        rows = [
            {"stage": i, "start": s, "end": e, "opened_by": "" if i == 0 else self.kinds[i - 1]}
            for i, (s, e) in enumerate(self.segments)
        ]
        return pd.DataFrame(rows)

    def figure(self, log_x: bool = False) -> go.Figure:
        """Each column over steps (one panel each, shared x axis), the boundaries as vertical
        lines labelled by kind, the stages shaded alternately.
        """
        from interp.stages.drawing import stages_figure

        return stages_figure(self, log_x=log_x)


def series(table: Any, columns: Sequence[str]) -> tuple[list[int], dict[str, np.ndarray]]:
    """The steps and each column's values per step of `table` (a DataFrame with a ``step``
    column, or metrics records); several rows of one step (an `evolve` table's chains or heads)
    are averaged, and steps missing a column are dropped.

    Raises:
        ConfigError: If a column is not in the table (naming the valid ones).
    """
    import pandas as pd

    frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    if "step" not in frame.columns:
        raise ConfigError("the table has no 'step' column", "give an evolve table or a run's metrics")
    numeric = [c for c in frame.columns if c != "step" and pd.api.types.is_numeric_dtype(frame[c])]
    for column in columns:
        if column not in numeric:
            raise ConfigError(
                f"column {column!r} is not a numeric column of the table", did_you_mean(column, numeric)
            )
    grouped = frame[["step", *columns]].dropna().groupby("step").mean().sort_index()
    return [int(s) for s in grouped.index], {c: grouped[c].to_numpy(dtype=float) for c in columns}


def find_stages(
    table: Any,
    columns: Sequence[str] = ("llc",),
    *,
    method: str = "llc",
    smooth: float = 1.0,
    slope: str = "log-step",
    plateau_tol: float = 0.05,
    min_size: int = 2,
    penalty: float | None = None,
    n_boundaries: int | None = None,
    target: float = 1.0,
    tol: float = 0.05,
) -> Stages:
    """Stage boundaries of `columns` in `table` by `method` (see the module docstring).

    Args:
        table: An `evolve` table (`Evolution.to_frame()`), any DataFrame with a ``step`` column,
            or a run's metrics records.
        columns: The series: one for ``"llc"`` and ``"rise"`` (a rise: several keys' minimum, as
            `find_rise` reads them), any number for ``"changepoint"``.
        method: ``"llc"``, ``"changepoint"`` or ``"rise"``.
        smooth: Gaussian smoothing width, in evaluations (``"llc"``; 0: none).
        slope: What the slope is taken against (``"llc"``): ``"log-step"``, log10(step + 1), or
            ``"checkpoint"``, the position in the checkpoint list (for series whose spacing
            changes, e.g. dense around an onset late in training).
        plateau_tol: A plateau's slope, as a fraction of the largest slope (``"llc"``).
        min_size: Fewest evaluations in a plateau (``"llc"``) or a segment (``"changepoint"``).
        penalty: PELT's penalty (``"changepoint"``); None: ``4 k sigma^2 log T``.
        n_boundaries: Exactly this many change points (``"changepoint"``), instead of a penalty.
        target: The level risen to (``"rise"``, as `find_rise`).
        tol: Its tolerance at both ends (``"rise"``, as `find_rise`).

    Raises:
        ConfigError: On an unknown method, a missing column, or a series too short.
    """
    if method not in METHODS:
        raise ConfigError(f"stages method {method!r} is unknown", did_you_mean(method, METHODS))
    if slope not in SLOPES:
        raise ConfigError(f"stages slope {slope!r} is unknown", did_you_mean(slope, SLOPES))
    if slope != "log-step" and method != "llc":
        raise ConfigError(
            f"stages slope {slope!r} applies to the llc rule only", f"method='llc', not {method!r}"
        )
    if not columns:
        raise ConfigError("stages need at least one column", "e.g. llc, or val/acc")
    steps, values = series(table, columns)
    if len(steps) < 3:
        raise ConfigError(f"{len(steps)} evaluations are too few to find stages in", "give at least 3")
    listed = {c: v.tolist() for c, v in values.items()}
    if method == "rise":
        records = [{"step": s, **{c: values[c][i] for c in columns}} for i, s in enumerate(steps)]
        rise = find_rise(records, tuple(columns) if len(columns) > 1 else columns[0], target, tol)
        found = [] if rise is None else [(rise.onset, "onset"), (rise.end, "end")]
        # find_rise's onset is the last evaluation *before* the rise: the new stage starts after it.
        found = [(steps[steps.index(s) + 1] if k == "onset" else s, k) for s, k in found]
        return Stages(method, list(columns), steps, listed, [s for s, _ in found], [k for _, k in found])
    if method == "changepoint":
        found = _change_points(
            np.stack([values[c] for c in columns], axis=1), min_size, penalty, n_boundaries
        )
        return Stages(
            method, list(columns), steps, listed, [steps[i] for i in found], ["change"] * len(found)
        )
    if len(columns) != 1:
        raise ConfigError(f"the llc rule reads one column, not {len(columns)}", "give one --column")
    x = np.log10(np.asarray(steps) + 1.0) if slope == "log-step" else np.arange(len(steps), dtype=float)
    smoothed, found = _critical_points(x, values[columns[0]], smooth, plateau_tol, min_size)
    return Stages(
        method,
        list(columns),
        steps,
        listed,
        [steps[i] for i, _ in found],
        [k for _, k in found],
        smoothed.tolist(),
    )


def _critical_points(
    x: np.ndarray, y: np.ndarray, smooth: float, plateau_tol: float, min_size: int
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """The smoothed curve, and its critical points ``(index, kind)``: slope sign changes and the
    middles of interior plateaus (an extremum inside a plateau counts once, as the plateau).
    `x` is what the slope is taken against (log-steps or checkpoint positions), increasing.
    """
    from scipy.ndimage import gaussian_filter1d

    smoothed = gaussian_filter1d(y, smooth, mode="nearest") if smooth > 0 else y.copy()
    slope = np.gradient(smoothed, x)
    scale = np.abs(slope).max()
    flat = np.abs(slope) <= plateau_tol * scale if scale > 0 else np.ones_like(slope, dtype=bool)
    found: dict[int, str] = {}
    i = 0
    while i < len(flat):  # interior plateaus: runs of flat slope not touching either end
        j = i
        while j < len(flat) and flat[j]:
            j += 1
        if j - i >= min_size and i > 0 and j < len(flat):
            found[(i + j - 1) // 2] = "plateau"
        elif j > i and i > 0 and j < len(flat) and np.sign(slope[i - 1]) != np.sign(slope[j]):
            # A peak or trough whose own slope is near 0 (a symmetric extremum): a flat run too
            # short for a plateau, between slopes of opposite sign. The sign test below skips
            # flat points, so without this such an extremum was lost.
            found[(i + j - 1) // 2] = "max" if slope[i - 1] > 0 else "min"
        i = j + 1 if j == i else j
    for k in range(1, len(slope)):
        if flat[k] or flat[k - 1] or np.sign(slope[k]) == np.sign(slope[k - 1]):
            continue
        if not any(abs(k - p) < min_size for p in found):
            found[k] = "max" if slope[k - 1] > 0 else "min"
    return smoothed, sorted(found.items())


def _change_points(
    signal: np.ndarray, min_size: int, penalty: float | None, n_boundaries: int | None
) -> list[int]:
    """Indices where a new segment starts, by ruptures (PELT with a penalty, or the exact
    segmentation with `n_boundaries`), on each column standardised.
    """
    import ruptures

    std = signal.std(axis=0)
    signal = (signal - signal.mean(axis=0)) / np.where(std > 0, std, 1.0)
    if n_boundaries is not None:
        ends = ruptures.Dynp(model="l2", min_size=min_size, jump=1).fit(signal).predict(n_bkps=n_boundaries)
    else:
        if penalty is None:
            diffs = np.diff(signal, axis=0)
            sigma = np.median(np.abs(diffs - np.median(diffs, axis=0)), axis=0) * 1.4826 / np.sqrt(2)
            noise = float(np.mean(np.maximum(sigma, 1e-3) ** 2))
            penalty = PENALTY_FACTOR * signal.shape[1] * noise * np.log(len(signal))
        ends = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(signal).predict(pen=penalty)
    return [e for e in ends if e < len(signal)]
