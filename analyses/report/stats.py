"""Intervals for a mean over seeds: the Student-t interval every study's table reports."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval of the mean; NaN bounds for fewer than 2 values, exact for no spread."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    sem = float(x.std(ddof=1) / math.sqrt(len(x)))
    if sem == 0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return mean, float(low), float(high)
