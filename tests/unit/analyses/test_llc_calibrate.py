"""`llc-calibrate`'s recommendation rule, and `llc --calibration` reading and recording it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from analyses.llc import calibrated
from analyses.llc_calibrate import RULE, CalibrateResult, recommend
from analyses.llc_params import CalibrateParams, Params, n_beta_values
from interp.errors import CheckpointError, ConfigError


def _cell(step_size: float, n_beta: float, flags: str = "") -> dict:
    return dict(
        step_size=step_size, n_beta=n_beta, estimate=1.0, se=0.1, rhat=1.0, ess=500.0, drift=0.0, flags=flags
    )


def test_the_largest_healthy_step_at_the_n_beta_nearest_n_over_log_n():
    cells = [
        _cell(1e-5, 100.0), _cell(1e-4, 100.0), _cell(1e-3, 100.0, "diverged"),
        _cell(1e-3, 30.0), _cell(1e-2, 30.0, "nan"),
    ]  # fmt: skip
    best = recommend(cells, default=100.0)
    assert (best["step_size"], best["n_beta"], best["healthy"]) == (1e-4, 100.0, True)


def test_no_healthy_cell_gives_the_fewest_flags_marked_unhealthy():
    cells = [_cell(1e-5, 100.0, "rhat,ess"), _cell(1e-4, 100.0, "ess"), _cell(1e-3, 100.0, "ess")]
    best = recommend(cells, default=100.0)
    assert (best["step_size"], best["healthy"]) == (1e-4, False)


def test_n_betas_as_multiples_of_n_over_log_n_and_bad_grids():
    assert n_beta_values("0.5x,1x,300", 200.0) == [100.0, 200.0, 300.0]
    with pytest.raises(ConfigError, match="not a number"):
        CalibrateParams(step_sizes="1e-4,abc")
    with pytest.raises(ConfigError, match="step_sizes = 0.0"):
        CalibrateParams(step_sizes="0")
    with pytest.raises(ConfigError, match="leave it empty"):
        CalibrateParams(calibration="somewhere")


def test_an_llc_result_records_the_calibration_it_used(tmp_path):
    result = CalibrateResult(
        params={}, step=7, step_size=[1e-5, 1e-4], n_beta=[50.0, 50.0], estimate=[1.0, 1.1], se=[0.1, 0.1],
        rhat=[1.0, 1.0], ess=[500.0, 500.0], drift=[0.0, 0.0], flags=["", ""], default_n_beta=50.0,
        recommended=recommend([_cell(1e-5, 50.0), _cell(1e-4, 50.0)], 50.0),
    )  # fmt: skip
    result.save(tmp_path / "cal", figure=False)
    step_size, n_beta, record = calibrated(Params(calibration=str(tmp_path / "cal")))
    assert (step_size, n_beta) == (1e-4, 50.0) and record["folder"] == str(tmp_path / "cal")
    assert calibrated(Params(step_size=3e-5))[2] is None
    with pytest.raises(CheckpointError, match="no llc-calibrate result"):
        calibrated(Params(calibration=str(tmp_path / "nothing")))
    assert math.isclose(result.to_frame()["recommended"].sum(), 1)
    assert len(result.figure().layout.shapes) == 1  # the recommended cell outlined
    assert result.summary() == (
        f"Some cells were healthy; by the calibration's rule ({RULE}) the setting used is step size 0.0001 at "
        "n_beta 50.0."
    )
    flagged = recommend([_cell(1e-5, 50.0, "ess"), _cell(1e-4, 50.0, "rhat,ess")], 50.0)
    assert (
        replace(result, recommended=flagged)
        .summary()
        .startswith("No cell was healthy (every cell flagged); by the calibration's rule")
        and "step size 1e-05 at n_beta 50.0." in replace(result, recommended=flagged).summary()
    )
