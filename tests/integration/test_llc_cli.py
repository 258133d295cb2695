"""`interp llc`, `interp llc-calibrate`, `interp evolve --analysis llc` and `interp stages` on
the committed study-A series: bad input is one line, exit 2, before torch is imported (read
from `sys.modules` of a fresh interpreter, as tests/integration/test_preflight.py does), and
`interp stages` finds the phase-2 rise of a committed series.
"""

from __future__ import annotations

import pytest

from tests.integration.test_preflight import ROOT, run_fresh

SERIES = str(ROOT / "results" / "study-a" / "series" / "mpsp-2l2h-r0.9")


@pytest.mark.parametrize(
    "args, says",
    [
        (["llc", "--ckpt", SERIES, "--step-size", "0"], "step_size = 0.0"),
        (["llc", "--ckpt", SERIES, "--step-size", "-1e-4"], "step_size = -0.0001"),
        (["llc", "--ckpt", SERIES, "--chains", "0"], "chains = 0"),
        (["llc", "--ckpt", SERIES, "--vectorize", "--stack"], "llc.vectorize and llc.stack are both set"),
        (["llc", "--ckpt", SERIES, "--restrict", "L0H1x"], "'L0H1x' names no part"),
        (["llc", "--ckpt", SERIES, "--restrict", "blocks.0.atn"], "did you mean 'attn'"),
        (["llc-calibrate", "--ckpt", SERIES, "--step-sizes", "1e-4,0"], "step_sizes = 0.0"),
        (["evolve", "--run", SERIES, "--analysis", "llc", "--param", "chains=0", "--out", "x"], "chains = 0"),
        (["stages", "--run", SERIES, "--column", "adv/ac"], "did you mean 'adv/acc'"),
        (
            ["stages", "--run", SERIES, "--column", "adv/acc", "--slope", "log"],
            "one of 'log-step', 'checkpoint'",
        ),
        (
            ["stages", "--run", SERIES, "--column", "adv/acc", "--slope", "checkpoint"],
            "--slope checkpoint applies to --method llc only",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_before_torch(args, says):
    code, heavy, err = run_fresh(*args)
    assert code == 2 and heavy == [], (code, heavy, err)
    assert len(err) == 1 and says in err[0], err


def test_stages_of_a_committed_series_finds_its_phase_2_rise(tmp_path):
    code, _, err = run_fresh(
        "stages", "--run", SERIES, "--column", "val/acc", "--column", "adv/acc", "--method", "rise",
        "--out", str(tmp_path / "stages"),
    )  # fmt: skip
    assert code in (0, None), err
    assert (tmp_path / "stages" / "stages.csv").read_text().count("\n") == 4  # header + 3 stages
    assert (tmp_path / "stages" / "figure.html").stat().st_size > 0


def test_stages_slope_per_checkpoint_finds_the_near_miss_collapse_log_steps_miss(tmp_path):
    # Stage 2's near miss: checkpoints every 25 epochs late, and its LLC collapsing from 422.5 to
    # -23.3 in one of them; against log-steps the llc rule finds no boundary (issue 50's reading).
    table = str(ROOT / "results" / "llc" / "reading-b" / "replication-mpsp-2l2h-r0.9-memorised" / "whole.csv")
    args = ["stages", "--table", table, "--column", "estimate", "--method", "llc"]
    code, _, err = run_fresh(*args, "--out", str(tmp_path / "log"))
    assert code in (0, None), err
    code, _, err = run_fresh(*args, "--slope", "checkpoint", "--out", str(tmp_path / "checkpoint"))
    assert code in (0, None), err
    log = (tmp_path / "log" / "stages.csv").read_text().splitlines()
    checkpoint = (tmp_path / "checkpoint" / "stages.csv").read_text().splitlines()
    assert len(log) == 2  # header + one stage: no boundary
    assert "2,1750,1800,max" in "\n".join(checkpoint)  # the peak before the collapse opens a stage
