"""Study B's pilot projections (`analyses.studies.study_b.diagnostics.pilots`): the arithmetic of the rule."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyses.studies.study_b.diagnostics.pilots import (
    PROTOCOL_2,
    TARGET_COSINE,
    VARIANTS,
    decide,
    first_in_window,
    projection,
    squared_distance,
    steps_to_decorrelate,
    variant_settings,
)
from interp.errors import ConfigError
from tests.builders import STUDY_B_TOY as TOY

RADIUS = 30.0
# Thousands of tiny WLMD steps in the toy pilots: intra-op threads only add contention there.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cosine(d2: float) -> float:
    """The cosine at squared distance `d2` on the sphere of `RADIUS` (inverse of squared_distance)."""
    return 1 - d2 / (2 * RADIUS**2)


def _records(d2_per_walker, steps, **extra):
    return [
        {
            "step": s,
            "cosine": [_cosine(d2(s)) for d2 in d2_per_walker],
            "distance": [math.sqrt(d2(s)) for d2 in d2_per_walker],
            "walls": 0,
            **{k: v(s) for k, v in extra.items()},
        }
        for s in steps
    ]


def test_squared_distance_on_the_sphere():
    assert squared_distance(1.0, RADIUS) == 0
    assert squared_distance(0.0, RADIUS) == pytest.approx(2 * RADIUS**2)  # orthogonal points
    assert squared_distance(TARGET_COSINE, RADIUS) == pytest.approx(180.0)


def test_a_diffusive_walker_is_extrapolated_and_a_decorrelated_one_is_read():
    # walker 0 bursts over the first half, then diffuses at 0.65 per 1,000 steps (the fit reads
    # the second half only); walker 1 crosses cosine 0.9 (d2 = 180) at step 6,000; walker 2 stays.
    walkers = [
        lambda s: 5.0 + 0.65e-3 * s if s >= 5000 else 1.65e-3 * s,
        lambda s: 30e-3 * s,
        lambda s: 1.0,
    ]
    records = _records(walkers, range(1000, 10_001, 1000))
    steps = steps_to_decorrelate(records, RADIUS)
    assert steps[0] == pytest.approx(10_000 + (180 - (5 + 6.5)) / 0.65e-3)
    assert steps[1] == 6000
    assert steps[2] == math.inf


def test_first_arrival_in_the_window():
    records = [
        {"step": 100, "x": [2.0, 1.5], "y": [1.0, 2.0]},
        {"step": 200, "x": [-1.8, -1.7], "y": [9.95, 9.95]},
        {"step": 300, "x": [-1.8, -1.8], "y": [9.95, 9.95]},
    ]
    assert first_in_window(records, (-1.9, -1.75, 9.9, 10.2)) == (200.0, 1)
    assert first_in_window(records, (-5, -4, 9.9, 10.2)) == (math.inf, 0)


def test_core_hours_per_sample_divide_by_the_walkers():
    pilot = {
        "variant": "v",
        "walkers": 2,
        "starts": "adamw",
        "radius": RADIUS,
        "cpu_seconds": 720.0,
        "steps_timed": 10_000,
    }
    records = _records([lambda s: 18e-3 * s, lambda s: 18e-3 * s], range(1000, 10_001, 1000))
    row = projection(pilot, records)
    assert row["projected steps"] == 10_000  # both cross d2 = 180 at step 10,000
    assert row["CPU s / step"] == pytest.approx(0.072)
    assert row["core-hours / sample"] == pytest.approx(10_000 * 0.072 / 3600 / 2)


def test_a_random_start_that_never_arrives_has_no_projection():
    pilot = {
        "variant": "random-starts",
        "walkers": 2,
        "starts": "random",
        "radius": RADIUS,
        "window": [-1.9, -1.7, 9.9, 10.2],
        "cpu_seconds": 100.0,
        "steps_timed": 1000,
    }
    records = [
        {"step": s, "x": [2.0, 2.0], "y": [1.0, 1.0], "cosine": [0.01, 0.0], "walls": 3} for s in (500, 1000)
    ]
    assert projection(pilot, records)["core-hours / sample"] == math.inf


def _rows(**hours):
    return pd.DataFrame(
        [{"variant": k.replace("_", "-"), "core-hours / sample": v} for k, v in hours.items()]
    )


def test_the_rule_adopts_only_a_variant_at_most_half_of_protocol_2():
    assert decide(_rows(protocol_2=4.0, larger_dt=2.0, random_starts=math.inf))[0] == "larger-dt"
    assert decide(_rows(protocol_2=4.0, larger_dt=2.1, walkers_own_starts=3.0))[0] == "protocol-2"
    assert decide(_rows(protocol_2=4.0, larger_dt=1.0, walkers_own_starts=0.5))[0] == "walkers-own-starts"
    kept, why = decide(_rows(protocol_2=math.inf, larger_dt=math.inf))
    assert kept == "protocol-2" and "best: larger-dt at inf" in why


def test_variant_settings_change_only_what_the_variant_names():
    for variant in VARIANTS:
        settings = variant_settings(variant, 10_000)
        assert (settings.walkers, settings.dt, settings.gamma) == (variant.walkers, variant.dt, variant.gamma)
        assert settings.steps == 10_000 and settings.target_cosine is None and settings.production_steps == 0
        assert settings.bins == PROTOCOL_2.wlmd.bins and settings.x_below == PROTOCOL_2.wlmd.x_below
    assert variant_settings(VARIANTS[0], 10_000).dt == PROTOCOL_2.wlmd.dt


@pytest.mark.slow
def test_the_pilots_run_resume_and_rebuild_from_their_records(tmp_path):
    """Every variant at toy scale (p = 11, 20 steps): the walks start where the variant says, the
    records rebuild the same table after export, and a second call runs nothing again.
    """
    import json

    from analyses.studies.study_b.diagnostics.pilots import export_pilots, pilot_table, run_pilots
    from analyses.studies.study_b.settings import settings_with
    from interp.store import list_checkpoints

    settings = settings_with(TOY, PROTOCOL_2)
    frame = run_pilots(tmp_path / "run", steps=20, settings=settings)
    assert list(frame["variant"]) == [v.name for v in VARIANTS]
    assert list(frame["walkers"]) == [v.walkers for v in VARIANTS]
    assert (frame["steps run"] == 20).all() and (frame["CPU s / step"] > 0).all()
    own = json.loads((tmp_path / "run" / "walkers-own-starts" / "walk.json").read_text())
    assert own[0]["cosine"][0] > 0.99 and len(own[0]["cosine"]) == 3  # each near its own start
    random = json.loads((tmp_path / "run" / "random-starts" / "walk.json").read_text())
    assert [r["step"] for r in random] == list(range(0, 21))  # the start, then every step at this scale
    assert (tmp_path / "run" / "model-1100-1").is_dir() and list_checkpoints(
        tmp_path / "run" / "model-1100-1"
    )[0] == 0
    mtime = (tmp_path / "run" / "larger-dt" / "pilot.json").stat().st_mtime_ns
    again = run_pilots(tmp_path / "run", steps=20, settings=settings)
    assert (tmp_path / "run" / "larger-dt" / "pilot.json").stat().st_mtime_ns == mtime
    pd.testing.assert_frame_equal(again, frame)
    exported = export_pilots(tmp_path / "run", tmp_path / "records")
    assert not list(exported.rglob("*.safetensors"))  # no weights
    walk = json.loads((exported / "random-starts" / "walk.json").read_text())
    assert ["S" in r for r in walk] == [False] * (len(walk) - 1) + [True]  # S in the last record only
    pd.testing.assert_frame_equal(pilot_table(exported), frame)


def test_a_grid_is_protocol_2s_unless_a_start_lies_outside_it():
    from analyses.studies.study_b.protocol import grid_holding

    narrow = PROTOCOL_2.wlmd
    base = narrow.grid(-2.0, 9.95)
    assert grid_holding(narrow, (-2.0, 9.95), [(-2.1, 9.96), (-1.9, 9.97)]) == base
    wider = grid_holding(narrow, (-2.0, 9.95), [(-2.1, 9.96), (base.x_range[1] + 0.01, 9.97)])
    width = (base.x_range[1] - base.x_range[0]) / base.n_x
    assert wider.x_range[0] == base.x_range[0] and wider.n_x == base.n_x + 1
    assert wider.x_range[1] == pytest.approx(base.x_range[1] + width) and wider.y_range == base.y_range


def test_the_production_check_samples_each_walker_and_measures_its_cosine(tmp_path):
    """walkers-own-starts at toy scale with a window that holds every state: production saves
    samples of every walker, each with its (x, y) in the window and its cosine to its own
    start as computed here from the stored weights; the check passes, and reads back.
    """
    import json

    import torch

    from analyses.studies.study_b.diagnostics.pilots import PRODUCTION_FILE, production_check, run_pilots
    from analyses.studies.study_b.settings import settings_with
    from interp.store import checkpoint_dir, list_checkpoints
    from models import load_model

    # Production looks at every 5th step with a window that holds every state.
    production = {"window_x": 100.0, "window_y": 0.0, "production_steps": 40, "every": 5, "max_samples": 7}
    settings = settings_with({**TOY, "wlmd": production}, PROTOCOL_2)
    own = VARIANTS[1]
    run_pilots(tmp_path, steps=20, variants=(own,), settings=settings)
    check = production_check(tmp_path, own, settings=settings)

    assert check["passed"] and len(check["samples"]) == 7  # capped at max_samples
    assert [s["walker"] for s in check["samples"]] == [0, 1, 2, 0, 1, 2, 0]  # every look, every walker
    x_lo, x_hi, y_lo, y_hi = check["window"]
    assert all(x_lo <= s["x"] <= x_hi and y_lo <= s["y"] <= y_hi for s in check["samples"])

    def weights(run, step=-1):
        """The trainable parameters of checkpoint `step` of `run`, flat in name order (a cosine
        is the same in any order both vectors share; buffers are not walked).
        """
        model, ckpt = load_model(checkpoint_dir(run, list_checkpoints(run)[step]))
        names = sorted(name for name, p in model.named_parameters() if p.requires_grad)
        return torch.cat([ckpt.state_dict[name].double().flatten() for name in names])

    production = tmp_path / own.name / "production-check"
    starts = [tmp_path / "adamw", tmp_path / "model-101-30", tmp_path / "model-102-30"]
    for n, sample in enumerate(check["samples"]):
        theta, start = weights(production, n), weights(starts[sample["walker"]])
        assert sample["cosine"] == pytest.approx(
            float(theta @ start / (theta.norm() * start.norm())), abs=1e-9
        )
    assert max(s["cosine"] for s in check["samples"]) < 1  # the walkers moved
    stored = json.loads((tmp_path / own.name / PRODUCTION_FILE).read_text())
    assert production_check(tmp_path, own, settings=settings) == stored  # read back, not rerun
    with pytest.raises(ConfigError, match="valid: protocol-2, walkers-own-starts"):
        production_check(tmp_path, "own-starts", settings=settings)
