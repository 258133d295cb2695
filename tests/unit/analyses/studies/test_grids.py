"""Sweep grids: paired seeds by default, a crossed design on request, and the confirmation grids' seeds."""

from __future__ import annotations

import pytest

from analyses.grids import Grid, expand
from analyses.studies.grids import GRIDS
from analyses.studies.study_a.grids import mechanism_max_grid
from interp.cli import main
from interp.cli.sweep import load_grid
from interp.config import from_dict
from interp.errors import ConfigError
from interp.training.config import EVAL_MEASURES, TrainConfig


def test_a_crossed_design_gives_every_training_set_every_initialisation(tmp_path):
    grid = Grid(presets=("mpsp-2l2h",), task={"vocab": 8}, axes={"r": [0.9]}, seeds=3, data_seeds=4)
    specs = expand(grid, tmp_path)
    assert len(specs) == 12
    assert specs[4].out == tmp_path / "mpsp-2l2h" / "r=0.9" / "data_1" / "seed_1"
    assert specs[4].tags == {"preset": "mpsp-2l2h", "r": 0.9, "data": 1, "seed": 1}
    by = {(s.tags["data"], s.tags["seed"]): s.train for s in specs}
    assert len({t["data_seed"] for t in by.values()}) == 4 and len({t["seed"] for t in by.values()}) == 3
    assert all(by[d, m]["seed"] == by[0, m]["seed"] for d, m in by)  # one initialisation per model seed
    assert all(
        by[d, m]["data_seed"] == by[d, 0]["data_seed"] for d, m in by
    )  # one training set per data seed
    with pytest.raises(ConfigError, match="data_seeds=0"):
        Grid(presets=("mpsp-2l2h",), data_seeds=0)


def test_paired_seeds_are_unchanged_by_the_crossed_option(tmp_path):
    """The map's runs were derived before crossed designs existed: their seeds must not move."""
    spec = expand(GRIDS["study-a-map"], tmp_path)[0]
    assert spec.out == tmp_path / "mpsp-2l2h" / "vocab=16" / "r=0.9" / "seed_0"
    from interp.sweep.specs import derive_seed

    assert spec.train["data_seed"] == derive_seed(300, 0, "data")
    assert spec.train["seed"] == derive_seed(300, 0, spec.model)


def test_confirmation_grids_use_sweep_seeds_no_other_study_a_grid_uses():
    # The map's family (its one-layer cells, and vocabulary 64 in stage (b)) extends the map
    # with its own sweep seed; no other two-layer grid shares 300 or 500.
    confirmation = {"study-a-map": 300, "study-a-crossed": 500}
    family = {"study-a-map-1l1h", "study-a-vocab64"}
    for name, seed in confirmation.items():
        assert GRIDS[name].sweep_seed == seed
    assert all(GRIDS[name].sweep_seed == 300 for name in family if name in GRIDS)
    others = {
        g.sweep_seed
        for n, g in GRIDS.items()
        if n not in confirmation and n not in family and "mpsp-2l2h" in g.presets
    }
    assert others.isdisjoint(confirmation.values())


def test_the_mechanism_grid_runs_the_max_shortcut_at_the_maps_cadence(tmp_path):
    specs = expand(mechanism_max_grid(24), tmp_path)
    assert [s.out for s in specs] == [
        tmp_path / "mpsp-2l2h" / "vocab=24" / "r=0.9" / f"seed_{i}" for i in range(3)
    ]
    from interp.sweep.specs import derive_seed

    for index, spec in enumerate(specs):
        assert spec.task["shortcut"] == "max" and spec.task["vocab"] == 24 and spec.task["r"] == 0.9
        assert spec.train["seed"] == derive_seed(600, index, spec.model)
        assert spec.train["data_seed"] == derive_seed(600, index, "data")
        assert tuple(spec.train["eval_measures"]) == EVAL_MEASURES
        from_dict(TrainConfig, spec.train)  # a valid training config
    the_map = expand(GRIDS["study-a-map"], tmp_path)[0]
    cadence = ("epochs", "eval_every", "eval_log_points", "checkpoint_every", "checkpoint_log_points")
    assert all(specs[0].train[k] == the_map.train[k] for k in cadence)
    others = {g.sweep_seed for name, g in GRIDS.items() if name != "study-a-mechanism-max"}
    assert 600 not in others


def test_the_mechanism_grid_waits_for_v_star(capsys):
    from analyses.studies.study_a import grids

    if grids.V_STAR is None:
        assert "study-a-mechanism-max" in grids.PENDING and "study-a-mechanism-max" not in GRIDS
        with pytest.raises(ConfigError, match="cannot be built yet.*V_STAR"):
            load_grid("study-a-mechanism-max", seeds=None, epochs=None, axes=[])
        with pytest.raises(SystemExit) as info:
            main(["sweep", "--grid", "study-a-mechanism-max", "--out", "unused"])
        assert info.value.code == 2 and "V_STAR" in capsys.readouterr().err
    else:
        assert GRIDS["study-a-mechanism-max"] == mechanism_max_grid(grids.V_STAR)
        assert "study-a-mechanism-max" not in grids.PENDING


def test_the_headline_grid_is_the_preregistered_one_at_v_star():
    """Both models x r = 0.9, 0.5 at V*, 10 seeds of sweep seed 400, 3,000 epochs, the circuit
    measures on, two layers first (its primary test), seed-major.
    """
    from analyses.studies.study_a import grids

    headline = GRIDS["study-a-headline"]
    assert headline.task["vocab"] == grids.V_STAR == 32 and headline.sweep_seed == 400
    assert (headline.presets, headline.axes, headline.seeds) == (
        ("mpsp-2l2h", "mpsp-1l1h"),
        {"r": [0.9, 0.5]},
        10,
    )
    assert headline.train["epochs"] == 3000 and set(headline.train["eval_measures"]) == {
        "attn_pos0",
        "ov_parity_rho",
        "grad_groups",
    }


def test_stage_a_grids_share_the_preregistered_seeds(tmp_path):
    """The map's one-layer cells train on the map's training sets (sweep seed 300); below chance
    (r = 0.15) reuses the headline's first five seeds of both models (sweep seed 400).
    """
    from analyses.studies.study_a import grids
    from interp.sweep.specs import derive_seed

    one_layer = expand(GRIDS["study-a-map-1l1h"], tmp_path / "m")
    two_layer = expand(GRIDS["study-a-map"], tmp_path / "m")
    assert len(one_layer) == len(two_layer) == 40
    for a, b in zip(one_layer, two_layer):
        assert a.model != b.model and a.task == b.task
        assert a.train["data_seed"] == b.train["data_seed"]
        assert a.train["epochs"] == b.train["epochs"] == 1500
        assert a.train["seed"] == derive_seed(300, int(a.out.name.removeprefix("seed_")), a.model)
    if grids.V_STAR is None:
        assert "study-a-below-chance" not in GRIDS
        return
    below = expand(GRIDS["study-a-below-chance"], tmp_path / "b")
    headline = {(s.out.parts[-3], s.out.name): s for s in expand(GRIDS["study-a-headline"], tmp_path / "h")}
    assert len(below) == 10 and {s.task["r"] for s in below} == {0.15}
    for spec in below:
        twin = headline[(spec.out.parts[-3], spec.out.name)]  # preset folder, seed_i
        assert spec.train == twin.train and spec.task == {**twin.task, "r": 0.15}


def test_stage_b_grids_change_one_thing_of_the_headline_or_take_fresh_seeds(tmp_path):
    """Weight decay 0.4 and the max shortcut run the headline's first five seeds with that one
    setting changed; capacity and the ternary label take sweep seed 700, which no other grid
    uses; vocabulary 64 extends the map (its seeds and cadence) to both models.
    """
    from analyses.studies.study_a import grids

    if grids.V_STAR is None:
        assert "study-a-wd" not in GRIDS
        return
    headline = {
        (s.out.parts[-3], s.out.parts[-2], s.out.name): s
        for s in expand(GRIDS["study-a-headline"], tmp_path / "h")
    }
    for name, changed in (
        ("study-a-wd", ("train", "weight_decay", 0.4)),
        ("study-a-max", ("task", "shortcut", "max")),
    ):
        specs = expand(GRIDS[name], tmp_path / name)
        assert len(specs) == (5 if name == "study-a-wd" else 20)
        for spec in specs:
            twin = headline[(spec.out.parts[-3], spec.out.parts[-2], spec.out.name)]
            section, key, value = changed
            assert getattr(spec, section) == {**getattr(twin, section), key: value}
            other = "task" if section == "train" else "train"
            assert getattr(spec, other) == getattr(twin, other) and spec.model == twin.model
    used = {g.sweep_seed for n, g in GRIDS.items() if n not in ("study-a-capacity", "study-a-ternary")}
    for name, presets, rs in (
        ("study-a-capacity", {"mpsp-2l1h", "mpsp-1l2h"}, {0.9, 0.5}),
        ("study-a-ternary", {"mpsp-2l2h", "mpsp-1l1h"}, {0.9, 1 / 3}),
    ):
        grid = GRIDS[name]
        assert grid.sweep_seed == 700 and 700 not in used and grid.seeds == 5
        specs = expand(grid, tmp_path / name)
        assert {s.tags["preset"] for s in specs} == presets and {s.task["r"] for s in specs} == rs
        assert all(s.train["epochs"] == 3000 and s.task["vocab"] == grids.V_STAR for s in specs)
    assert GRIDS["study-a-ternary"].task["label"] == "sum-mod3"
    wide = expand(GRIDS["study-a-vocab64"], tmp_path / "v")
    assert len(wide) == 20 and {s.task["vocab"] for s in wide} == {64}
    assert GRIDS["study-a-vocab64"].sweep_seed == 300 and all(s.train["epochs"] == 1500 for s in wide)


def test_the_decisive_stages_share_a_fresh_sweep_seed_and_change_only_weight_decay(tmp_path):
    """Study A decided: stage 1 (weight decay 0.4, both models, 10 seeds, 4,000 epochs) and
    stage 2 (weight decay 0.1, two layers, 30 seeds, 3,000 epochs) take sweep seed 800, which no
    earlier grid uses, so a two-layer seed index names the same data and initialisation in both.
    """
    from analyses.studies.study_a import grids

    if grids.V_STAR is None:
        assert "study-a-wd-headline" not in GRIDS
        return
    stage_1, stage_2 = GRIDS["study-a-wd-headline"], GRIDS["study-a-replication"]
    earlier = {
        g.sweep_seed for n, g in GRIDS.items() if n not in ("study-a-wd-headline", "study-a-replication")
    }
    assert stage_1.sweep_seed == stage_2.sweep_seed == 800 and 800 not in earlier
    one = {(s.tags["preset"], s.task["r"], s.tags["seed"]): s for s in expand(stage_1, tmp_path / "1")}
    two = {(s.tags["preset"], s.task["r"], s.tags["seed"]): s for s in expand(stage_2, tmp_path / "2")}
    assert len(one) == 40 and len(two) == 60
    assert {k[:2] for k in one} == {(p, r) for p in ("mpsp-2l2h", "mpsp-1l1h") for r in (0.9, 0.5)}
    assert {k[:2] for k in two} == {("mpsp-2l2h", 0.9), ("mpsp-2l2h", 0.5)}
    assert all(s.train["epochs"] == 4000 and s.train["weight_decay"] == 0.4 for s in one.values())
    assert all(s.train["epochs"] == 3000 and s.train.get("weight_decay", 0.1) == 0.1 for s in two.values())
    assert all(
        set(s.train["eval_measures"]) == {"attn_pos0", "ov_parity_rho", "grad_groups"} for s in one.values()
    )
    for key, run in one.items():
        if key[0] == "mpsp-2l2h":  # paired: everything but weight decay and the epochs equal
            twin = two[key]
            assert run.model == twin.model and run.task == twin.task
            differ = {
                k for k in run.train.keys() | twin.train.keys() if run.train.get(k) != twin.train.get(k)
            }
            assert differ == {"epochs", "weight_decay"}
