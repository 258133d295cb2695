"""`interp.metrics.find_rise` on synthetic curves whose onset and end are known."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from interp.metrics import find_rise


def _records(values, steps=None, key="adv/acc"):
    steps = range(len(values)) if steps is None else steps
    return [{"step": s, key: v} for s, v in zip(steps, values)]


def test_a_step_rises_between_the_last_low_and_the_first_high_evaluation():
    records = _records([0.0] * 10 + [1.0] * 5, steps=[10 * i for i in range(15)])
    rise = find_rise(records, "adv/acc", 1.0)
    assert (rise.onset, rise.end, rise.plateau) == (90, 100, 0.0)


def test_a_curve_that_never_rises_or_starts_at_the_target_has_no_rise():
    assert find_rise(_records([0.0, 0.3, 0.5, 0.94, 0.2]), "adv/acc", 1.0, tol=0.05) is None
    assert find_rise(_records([1.0, 0.2, 1.0]), "adv/acc", 1.0) is None  # at the target from the start
    assert find_rise([], "adv/acc", 1.0) is None
    assert find_rise(_records([0.0, 1.0], key="val/acc"), "adv/acc", 1.0) is None  # no such metric


def test_rise_fall_rise_gives_the_first_rise():
    values = [0.5, 0.0, 0.0, 0.02, 0.0, 0.3, 0.8, 1.0, 1.0, 0.1, 0.0, 0.0, 0.6, 1.0]
    rise = find_rise(_records(values), "adv/acc", 1.0)
    assert (rise.onset, rise.end) == (4, 7)


def test_hold_skips_a_spike_that_does_not_last():
    values = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0]
    assert find_rise(_records(values), "adv/acc", 1.0).end == 2
    rise = find_rise(_records(values), "adv/acc", 1.0, hold=3)
    assert (rise.onset, rise.end) == (5, 7)


def test_several_keys_rise_when_all_have():
    # An inverted shortcut puts adv at 1 with val at 0; only the rule puts both at 1.
    records = [
        {"step": s, "val/acc": v, "adv/acc": a}
        for s, v, a in [
            (0, 0.5, 0.5),
            (1, 1.0, 0.0),
            (2, 0.0, 1.0),
            (3, 1.0, 0.0),
            (4, 1.0, 0.6),
            (5, 1.0, 1.0),
        ]
    ]
    assert find_rise(records, "adv/acc", 1.0).end == 2
    rise = find_rise(records, ("val/acc", "adv/acc"), 1.0)
    assert (rise.onset, rise.end) == (3, 5)


def test_the_early_transient_does_not_move_the_plateau():
    # Study A's adv accuracy starts near chance, falls to 0 under the shortcut, then rises.
    values = [0.5, 0.45, 0.2] + [0.0] * 20 + [0.2, 0.6, 0.97]
    rise = find_rise(_records(values), "adv/acc", 1.0)
    assert rise.plateau == 0.0 and (rise.onset, rise.end) == (22, 25)


@settings(max_examples=60, deadline=None)
@given(
    midpoint=st.integers(100, 180),
    width=st.floats(1.0, 8.0),
    low=st.floats(0.0, 0.4),
    amplitude=st.floats(0.0, 0.02),
    seed=st.integers(0, 2**16),
)
def test_a_noisy_sigmoid_rises_where_its_clean_curve_does(midpoint, width, low, amplitude, seed):
    """With noise bounded by a: the plateau is the low level to within a (the curve is flat for
    a long time before its midpoint); the onset lies between the clean curve's last evaluation at
    most P + tol - a and its last at most P + tol + a; the end between its first at least
    1 - tol - a and its first at least 1 - tol + a.
    """
    tol, n = 0.05, 280
    gen = random.Random(seed)
    clean = [low + (1 - low) / (1 + math.exp(-(t - midpoint) / width)) for t in range(n)]
    noisy = [v + gen.uniform(-amplitude, amplitude) for v in clean]
    rise = find_rise(_records(noisy), "adv/acc", 1.0, tol=tol)
    a, plateau = amplitude, rise.plateau
    assert abs(plateau - low) <= a + 0.005
    onset_low = max(t for t in range(n) if clean[t] <= plateau + tol - a)
    onset_high = max(t for t in range(n) if clean[t] <= plateau + tol + a)
    assert onset_low <= rise.onset <= onset_high
    end_low = min(t for t in range(n) if clean[t] >= 1 - tol - a)
    end_high = min(t for t in range(n) if clean[t] >= 1 - tol + a)
    assert end_low <= rise.end <= end_high
