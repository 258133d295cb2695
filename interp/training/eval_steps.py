"""When to evaluate and when to checkpoint: a fixed cadence plus log-spaced steps.

Training dynamics of small models happen on a log scale (a shortcut saturates in the first
hundred epochs, a generalising circuit appears after thousands), so besides a fixed cadence we
add log-spaced steps: dense early, sparse late. Schedules are pure functions of the config, so
an interrupted and resumed run evaluates and checkpoints at exactly the same steps.
"""

from __future__ import annotations

import math


def log_spaced_steps(last: int, points: int) -> set[int]:
    """Return about `points` integer steps spaced evenly in log scale over [1, last].

    Rounding merges the earliest points, so fewer than `points` steps may come back.
    """
    if points <= 0 or last < 1:
        return set()
    if points == 1:
        return {last}
    ratio = math.log(last) / (points - 1)
    return {min(last, round(math.exp(i * ratio))) for i in range(points)}


def schedule(last: int, every: int | None, log_points: int, *, include_zero: bool) -> list[int]:
    """Return the sorted steps in [0, last] at which something happens.

    Args:
        last: The final step; always included.
        every: A fixed cadence (multiples of `every`), or None for none.
        log_points: How many log-spaced steps to add (see `log_spaced_steps`).
        include_zero: Whether step 0 (before any update) is included.
    """
    steps = log_spaced_steps(last, log_points) | {last}
    if every:
        steps |= set(range(every, last + 1, every))
    if include_zero:
        steps.add(0)
    return sorted(steps)
