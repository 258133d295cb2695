"""Stage boundaries on synthetic series whose boundaries are known by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from interp.errors import ConfigError
from interp.metrics import find_rise
from interp.stages.boundaries import find_stages

STEPS = list(range(0, 600, 10))  # 60 evaluations


def _noisy(values: np.ndarray, scale: float, seed: int = 0) -> np.ndarray:
    return values + scale * np.random.default_rng(seed).standard_normal(len(values))


def test_change_points_of_a_piecewise_constant_series_are_found_where_the_levels_change():
    levels = np.repeat([0.0, 2.0, 0.5, 3.0], 15)  # changes at evaluations 15, 30, 45
    frame = pd.DataFrame({"step": STEPS, "x": _noisy(levels, 0.2)})
    stages = find_stages(frame, ["x"], method="changepoint")
    assert stages.boundaries == [STEPS[15], STEPS[30], STEPS[45]]
    assert stages.kinds == ["change"] * 3
    assert stages.segments == [(0, 140), (150, 290), (300, 440), (450, 590)]
    assert list(stages.to_frame()["stage"]) == [0, 1, 2, 3]


def test_change_points_of_several_columns_at_once_and_a_fixed_number():
    a = np.repeat([0.0, 1.0], 30)  # one change at 30
    b = np.repeat([5.0, 5.0, 1.0], 20)  # one change at 40
    frame = pd.DataFrame({"step": STEPS, "a": _noisy(a, 0.05, 1), "b": _noisy(b, 0.1, 2)})
    assert find_stages(frame, ["a", "b"], method="changepoint").boundaries == [STEPS[30], STEPS[40]]
    assert find_stages(frame, ["a", "b"], method="changepoint", n_boundaries=1).boundaries in (
        [STEPS[30]],
        [STEPS[40]],
    )


def test_pure_noise_has_no_change_point():
    frame = pd.DataFrame({"step": STEPS, "x": _noisy(np.zeros(60), 1.0, 3)})
    assert find_stages(frame, ["x"], method="changepoint").boundaries == []


def test_critical_points_of_a_rise_then_fall_and_a_plateau():
    # log-spaced checkpoints; the curve rises to a peak at step 100, falls to a plateau from step
    # ~1,000 to ~3,000, then rises again: one maximum near 100, one plateau between 1,000 and 3,000.
    steps = np.unique(np.round(np.logspace(0, 4, 60)).astype(int))
    t = np.log10(steps)
    y = np.where(t < 2, t, 4 - t)  # peak at log10 = 2
    y = np.where(t >= 3, 1.0, y)
    y = np.where(t >= 3.5, 1.0 + 2 * (t - 3.5), y)
    stages = find_stages(pd.DataFrame({"step": steps, "llc": y}), method="llc", smooth=1.0)
    kinds = dict(zip(stages.boundaries, stages.kinds))
    maxima = [s for s, k in kinds.items() if k == "max"]
    plateaus = [s for s, k in kinds.items() if k == "plateau"]
    assert len(maxima) == 1 and 70 <= maxima[0] <= 140
    assert len(plateaus) == 1 and 1000 <= plateaus[0] <= 3200
    assert len(stages.boundaries) == 2


def test_a_symmetric_peak_or_trough_on_log_spaced_checkpoints_is_found():
    # The smoothed slope at a symmetric extremum is ~0, a one-point flat run too short for a
    # plateau: it was skipped by the sign test and the extremum lost (it must not be).
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128]
    tent = np.array([1, 2, 3, 4, 5, 4, 3, 2, 1], dtype=float)
    for values, kind in ((tent, "max"), (6 - tent, "min")):
        found = find_stages(pd.DataFrame({"step": steps, "llc": values}), ["llc"], method="llc")
        assert (found.boundaries, found.kinds) == ([8], [kind])
    # A monotone rise whose slope flattens for one point in the middle has no extremum.
    rise = pd.DataFrame({"step": steps, "llc": [1, 2, 3, 4, 4.02, 5, 6, 7, 8]})
    assert find_stages(rise, ["llc"], method="llc").kinds.count("max") == 0


def test_a_slope_per_checkpoint_sees_a_collapse_that_log_steps_flatten_everything_beside():
    # Log-spaced to epoch 1,024, then every 25 epochs (dense around a late onset): the curve rises
    # to 400 and collapses in one checkpoint. Against log-steps that one slope is ~100x any other,
    # so every other counts as flat and the curve has no boundary; per checkpoint the peak is found.
    steps = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, *range(1750, 2051, 25), 3000]
    llc = np.r_[np.linspace(0, 400, 13), np.full(len(steps) - 13, 10.0)]
    frame = pd.DataFrame({"step": steps, "llc": llc})
    assert find_stages(frame, ["llc"], method="llc").boundaries == []
    found = find_stages(frame, ["llc"], method="llc", slope="checkpoint")
    assert found.kinds == ["max"] and abs(steps.index(found.boundaries[0]) - steps.index(1750)) <= 1


def test_a_slope_per_checkpoint_depends_only_on_the_checkpoints_order():
    # Any increasing relabelling of the steps moves no boundary's position; against log-steps it
    # does (the same values on other steps), so the option is not a no-op.
    values = _noisy(np.r_[np.linspace(0, 5, 20), np.linspace(5, 1, 20), np.full(20, 1.0)], 0.05, 4)
    positions = {}
    uneven = [10 * i if i < 30 else 300 + 500 * (i - 30) for i in range(60)]  # sparse after 30
    for label, steps in (("linear", STEPS), ("uneven", uneven)):
        for slope in ("log-step", "checkpoint"):
            found = find_stages(pd.DataFrame({"step": steps, "llc": values}), method="llc", slope=slope)
            positions[label, slope] = [steps.index(b) for b in found.boundaries]
    assert positions["linear", "checkpoint"] == positions["uneven", "checkpoint"]
    assert positions["linear", "checkpoint"]  # the peak at least
    assert positions["linear", "log-step"] != positions["uneven", "log-step"]


def test_rise_uses_find_rise_unchanged():
    records = [{"step": s, "adv/acc": 0.5 if s < 200 else (0.75 if s < 250 else 1.0)} for s in STEPS]
    stages = find_stages(records, ["adv/acc"], method="rise", target=1.0)
    rise = find_rise(records, "adv/acc", 1.0)
    assert (rise.onset, rise.end) == (190, 250)
    assert stages.boundaries == [200, 250] and stages.kinds == [
        "onset",
        "end",
    ]  # the stage starts after the onset


def test_an_evolve_table_with_several_rows_per_step_is_averaged():
    rows = [{"step": s, "chain": c, "llc": float(s >= 300) + 0.01 * c} for s in STEPS for c in range(4)]
    stages = find_stages(pd.DataFrame(rows), ["llc"], method="changepoint")
    assert stages.boundaries == [300] and len(stages.steps) == 60
    fig = stages.figure()
    assert len(fig.data) == 1 and any(s.type == "line" for s in fig.layout.shapes)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"columns": ["nope"]}, "not a numeric column"),
        ({"method": "hmm"}, "unknown"),
        ({"slope": "log"}, "slope 'log' is unknown.*log-step"),
        ({"slope": "checkpoint", "method": "changepoint"}, "applies to the llc rule only"),
        ({"columns": ["a", "b"]}, "one column"),
    ],
)
def test_bad_input_is_one_line(kwargs, message):
    frame = pd.DataFrame({"step": STEPS, "a": np.zeros(60), "b": np.zeros(60), "llc": np.zeros(60)})
    with pytest.raises(ConfigError, match=message):
        find_stages(frame, **{"columns": ["llc"], **kwargs})
