"""Study C: shared initialisation and nested corruption across xi (through the sweep grid),
the t_* milestones on synthetic metric streams, and the sweep tables on a fake sweep folder.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from scipy import stats

from analyses.grids import expand
from analyses.report.stats import t_interval
from analyses.studies.grids import GRIDS
from analyses.studies.study_c.tables import markdown_table, regime, runs_table, xi_table
from interp.metrics import milestones
from interp.store.run_folder import append_metrics, mark_done
from interp.sweep.specs import write_sweep
from models import build_model
from tasks import ModAddTask, task_from_dict


def test_same_seed_same_init_and_nested_corruption_at_every_xi(tmp_path):
    grid = dataclasses.replace(GRIDS["study-c"], seeds=2)
    specs = expand(grid, tmp_path)
    assert len(specs) == 7 * 2
    for seed in (0, 1):
        mine = sorted((s for s in specs if s.tags["seed"] == seed), key=lambda s: s.tags["xi"])
        assert len({s.train["seed"] for s in mine}) == 1 and len({s.train["data_seed"] for s in mine}) == 1
        first = build_model(mine[0].model, seed=mine[0].train["seed"]).state_dict()
        for spec in mine[1:]:
            other = build_model(spec.model, seed=spec.train["seed"]).state_dict()
            assert all(torch.equal(first[k], other[k]) for k in first)
        trains = [task_from_dict(s.task).splits(s.train["data_seed"])["train"] for s in mine]
        for small, big in zip(trains, trains[1:]):
            assert torch.equal(small.tokens, big.tokens)  # the partition never depends on xi
            a, b = small.groups["corrupted"], big.groups["corrupted"]
            assert not (a & ~b).any()  # nested
            assert torch.equal(small.labels[a], big.labels[a])  # same wrong labels
        for spec, train in zip(mine, trains):
            mask = train.groups["corrupted"]
            assert mask.sum().item() == int(spec.tags["xi"] * len(train))
            assert (train.labels[mask] != train.extras["true_labels"][mask]).all()
    seeds = {s.train["seed"] for s in specs}
    assert len(seeds) == 2  # different seeds do differ


def _stream(steps, clean, noisy, test):
    return [
        {"step": s, "train/clean/acc": c, **({} if n is None else {"train/corrupted/acc": n}), "test/acc": t}
        for s, c, n, t in zip(steps, clean, noisy, test)
    ]


def test_milestones_on_synthetic_streams():
    steps = [0, 10, 20, 30, 40, 50]
    records = _stream(
        steps,
        [0.01, 0.5, 0.99, 1.0, 1.0, 1.0],
        [0.0, 0.2, 0.98, 0.995, 0.3, 0.2],
        [0.01, 0.05, 0.2, 0.989999, 0.99, 1.0],
    )
    got = milestones(records, ModAddTask.milestones)
    assert {k: v["step"] for k, v in got.items()} == {"t_mem_clean": 20, "t_mem_noisy": 30, "t_gen": 40}
    assert got["t_mem_noisy"]["kept"] is False and got["t_gen"]["kept"] is True
    # xi = 0: no corrupted group, so no t_mem_noisy; never generalising: t_gen None
    clean_only = milestones(_stream(steps, [1.0] * 6, [None] * 6, [0.5] * 6), ModAddTask.milestones)
    assert clean_only["t_mem_clean"]["step"] == 0
    assert clean_only["t_mem_noisy"]["step"] is None and clean_only["t_gen"]["step"] is None


def test_t_interval_matches_scipy_and_edge_cases():
    values = [100, 140, 120, 180]
    mean, low, high = t_interval(values)
    expected = stats.t.interval(0.95, 3, loc=135, scale=stats.sem(values))
    assert mean == 135 and (low, high) == pytest.approx(expected)
    assert t_interval([7, 7]) == (7, 7, 7)
    assert t_interval([5])[0] == 5 and math.isnan(t_interval([5])[1])
    assert math.isnan(t_interval([])[0])


def test_regimes():
    assert regime(1.0, 0.99) == "coexistence"
    assert regime(0.99, 0.5) == "partial inversion"
    assert regime(0.99, 0.02) == "full inversion"
    assert regime(0.05, 0.01) == "forgetting"
    assert regime(0.3, 1.0) == "memorisation"


def test_tables_from_a_fake_sweep(tmp_path):
    grid = dataclasses.replace(GRIDS["study-c"], axes={"xi": [0.0, 0.5]}, seeds=2)
    specs = expand(grid, tmp_path)
    write_sweep(tmp_path, specs, {})
    gen = {(0.0, 0): 40, (0.0, 1): 60, (0.5, 0): None, (0.5, 1): 300}
    for spec in specs:
        spec.out.mkdir(parents=True)
        (spec.out / "config.json").write_text(json.dumps({}))
        t = gen[(spec.tags["xi"], spec.tags["seed"])]
        for step in (0, 20, 40, 60, 300):
            ok = t is not None and step >= t
            append_metrics(
                spec.out,
                {
                    "step": step,
                    "train/clean/acc": 1.0 if step >= 20 else 0.0,
                    **({"train/corrupted/acc": 1.0 if step >= 20 else 0.0} if spec.tags["xi"] else {}),
                    "test/acc": 1.0 if ok else 0.5,
                },
            )
        if (spec.tags["xi"], spec.tags["seed"]) != (0.5, 1):  # one run still going
            mark_done(spec.out, {})
    runs = runs_table(tmp_path)
    assert runs["done"].sum() == 3
    table = xi_table(runs).set_index("xi")
    assert table.loc[0.0, "t_gen mean"] == 50 and table.loc[0.0, "generalized"] == 2
    assert table.loc[0.0, "t_mem_noisy reached"] == 0 and table.loc[0.5, "t_mem_noisy mean"] == 20
    assert table.loc[0.5, "finished"] == 1 and table.loc[0.5, "generalized"] == 0
    assert table.loc[0.5, "test acc mean"] == 50
    text = markdown_table(xi_table(runs))
    assert "| 0 | 20 [20, 20] (2/2) | n/a |" in text and "never (0/1)" in text
