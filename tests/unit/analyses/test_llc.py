"""`llc` on our models: the sampler's fast training forward gives the hooked forward's estimate.

`analyses.llc.loss_of` samples on `fast_readout` where a model has one (equal to the hooked
readout to 1e-5 in fp32, `tests/unit/models/test_fast_forward.py`); the chains see the same
noise and minibatches either way, so their losses and estimates agree to float tolerance.
"""

from __future__ import annotations

import pytest
import torch

import models
from analyses.llc import loss_of
from interp.dissect.learning_coefficient import llc
from tasks import MPSPTask
from tests.builders import tiny_transformer

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TASK = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75)
SETTINGS = dict(step_size=1e-4, n_beta=30.0, localization=100.0, chains=2, draws=20, burn_in=10, seed=3)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize(
    ("batch_size", "vectorize"), [(100, False), (None, True)], ids=["minibatch-loop", "full-vmap"]
)
def test_the_fast_forward_gives_the_hooked_forwards_estimate(layers, batch_size, vectorize, monkeypatch):
    model = tiny_transformer(TASK, n_layers=layers)
    train = TASK.splits(0)["train"]
    data = (train.tokens, train.labels)
    calls = []
    fast_readout = models.Transformer.fast_readout
    monkeypatch.setattr(
        models.Transformer, "fast_readout", lambda m, t, **kw: calls.append(1) or fast_readout(m, t, **kw)
    )
    runs = {}
    for fast in (True, False):
        calls.clear()
        loss_fn = loss_of("cross_entropy", fast=fast, minibatch=batch_size is not None)
        runs[fast] = llc(model, data, loss_fn, batch_size=batch_size, vectorize=vectorize, **SETTINGS)
        assert bool(calls) == fast  # the fast run used the training forward, the other never
    fast, hooked = runs[True], runs[False]
    assert fast.init_loss == pytest.approx(hooked.init_loss, rel=1e-6)
    torch.testing.assert_close(fast.losses, hooked.losses, rtol=1e-4, atol=1e-6)
    assert fast.estimate == pytest.approx(hooked.estimate, rel=1e-3, abs=1e-3)
    assert fast.per_chain == pytest.approx(hooked.per_chain, rel=1e-3, abs=1e-3)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """A tiny trained run with checkpoints at steps 0, 1, 2."""
    from interp.training import TrainConfig, train
    from models import build_model, preset_config

    folder = tmp_path_factory.mktemp("series") / "run"
    config = TrainConfig(
        epochs=2, eval_every=1, eval_log_points=0, checkpoint_every=1, checkpoint_log_points=0
    )
    train(folder, build_model(preset_config("mpsp-1l1h", TASK), seed=0), TASK, config, progress=False)
    return folder


def _counting(computed: list):
    """`llc` whose compute records the `restrict` of every call."""
    import dataclasses

    from analyses import get_analysis

    llc_analysis = get_analysis("llc")

    def compute(subject, params):
        computed.append(params.restrict or "whole")
        return llc_analysis.compute(subject, params)

    return dataclasses.replace(llc_analysis, compute=compute)


SHORT = dict(chains=2, draws=4, burn_in=2, batch_size=32)


def test_whole_model_and_per_head_curves_are_cached_side_by_side(series):
    from analyses import evolve

    computed = []
    llc_analysis = _counting(computed)
    whole = evolve(series, llc_analysis, progress=False, **SHORT)
    head = evolve(series, llc_analysis, progress=False, restrict="L0H0", **SHORT)
    assert computed == ["whole"] * 3 + ["L0H0"] * 3
    computed.clear()
    again_whole = evolve(series, llc_analysis, progress=False, **SHORT)
    again_head = evolve(series, llc_analysis, progress=False, restrict="L0H0", **SHORT)
    assert computed == []  # both curves came from the cache
    assert [r.estimate for r in again_whole.results] == [r.estimate for r in whole.results]
    assert [r.estimate for r in again_head.results] == [r.estimate for r in head.results]
    assert [r.sampled for r in head.results] != [r.sampled for r in whole.results]
    folders = sorted(
        p.parent.relative_to(series / "analyses" / "llc") for p in series.glob("analyses/llc/**/result.json")
    )
    batch = "chains=2__draws=4__burn_in=2__batch_size=32"
    assert [str(f) for f in folders] == [
        *(f"{batch}/step_00000{s}" for s in range(3)),
        *(f"{batch}__restrict=L0H0/step_00000{s}" for s in range(3)),
    ]
    evolve(series, llc_analysis, progress=False, **dict(SHORT, draws=5))
    assert computed == ["whole"] * 3  # another setting: computed, beside the others


def test_a_recomputed_calibration_is_not_served_from_the_cache(series, tmp_path):
    from analyses import evolve
    from analyses.llc_calibrate import CalibrateResult, recommend

    def calibrate(step_size: float) -> None:
        cell = dict(
            step_size=step_size, n_beta=40.0, estimate=1.0, se=0.1, rhat=1.0, ess=500.0, drift=0.0, flags=""
        )
        CalibrateResult(
            params={}, step=2, step_size=[step_size], n_beta=[40.0], estimate=[1.0], se=[0.1], rhat=[1.0],
            ess=[500.0], drift=[0.0], flags=[""], default_n_beta=40.0, recommended=recommend([cell], 40.0),
        ).save(tmp_path / "cal", figure=False)  # fmt: skip

    computed = []
    llc_analysis = _counting(computed)
    calibrate(1e-4)
    first = evolve(series, llc_analysis, progress=False, calibration=str(tmp_path / "cal"), **SHORT)
    evolve(series, llc_analysis, progress=False, calibration=str(tmp_path / "cal"), **SHORT)
    assert len(computed) == 3 and {r.step_size for r in first.results} == {1e-4}
    calibrate(3e-5)  # the same folder, another recommendation
    second = evolve(series, llc_analysis, progress=False, calibration=str(tmp_path / "cal"), **SHORT)
    assert len(computed) == 6 and {r.step_size for r in second.results} == {3e-5}


def test_a_result_cached_before_settings_had_folders_is_still_read(series, tmp_path):
    import shutil

    from analyses import evolve

    computed = []
    llc_analysis = _counting(computed)
    cache = tmp_path / "cache"
    evolve(series, llc_analysis, progress=False, cache=cache, restrict="L0H0", **SHORT)
    (settings,) = [p for p in (cache / "llc").iterdir()]
    for step in settings.iterdir():  # where a per-head result lay before: llc/step_N
        shutil.move(step, cache / "llc" / step.name)
    settings.rmdir()
    computed.clear()
    old = evolve(series, llc_analysis, progress=False, cache=cache, restrict="L0H0", **SHORT)
    assert computed == [] and len(old.results) == 3
    evolve(series, llc_analysis, progress=False, cache=cache, **SHORT)  # other params: not that result
    assert computed == ["whole"] * 3


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize(
    ("batch_size", "restrict"), [(40, None), (None, "L0H0")], ids=["minibatch", "full-head"]
)
def test_stacked_chains_give_the_loops_estimate(layers, batch_size, restrict):
    """All chains in one pass of the stacked forward (`stack`): each chain on its own minibatches
    and noise, drawn as in the loop, so the traces agree to float tolerance chain by chain.
    """
    from analyses.llc import stacked_loss_of

    model = tiny_transformer(TASK, n_layers=layers)
    train = TASK.splits(0)["train"]
    data = (train.tokens, train.labels)
    settings = dict(SETTINGS, chains=3, batch_size=batch_size, restrict=restrict)
    looped = llc(model, data, loss_of("cross_entropy"), vectorize=False, **settings)
    stacked = llc(
        model, data, loss_of("cross_entropy"), stacked=stacked_loss_of(model, "cross_entropy"), **settings
    )
    assert stacked.settings["chains_run"] == "stacked" and looped.settings["chains_run"] == "loop"
    # batch 40: 25 chains a pass (all 3); the whole split (128): 8 (all 3)
    assert stacked.settings["chains_per_pass"] == 3
    torch.testing.assert_close(stacked.losses, looped.losses, rtol=1e-4, atol=1e-6)
    assert stacked.per_chain == pytest.approx(looped.per_chain, rel=1e-3, abs=1e-3)
    assert len(set(stacked.per_chain)) == 3  # three chains, not one repeated


def test_stacked_chains_go_in_groups_and_a_model_without_a_stacked_forward_loops(monkeypatch):
    from analyses.llc import stacked_loss_of
    from interp.dissect import learning_coefficient

    monkeypatch.setattr(learning_coefficient, "STACK_EXAMPLES", 80)
    model = tiny_transformer(TASK, n_layers=2)
    train = TASK.splits(0)["train"]
    data = (train.tokens, train.labels)
    settings = dict(SETTINGS, chains=3, draws=4, burn_in=2, batch_size=40)
    looped = llc(model, data, loss_of("cross_entropy"), vectorize=False, **settings)
    grouped = llc(
        model, data, loss_of("cross_entropy"), stacked=stacked_loss_of(model, "cross_entropy"), **settings
    )
    assert grouped.settings["chains_per_pass"] == 2  # two chains, then one
    torch.testing.assert_close(grouped.losses, looped.losses, rtol=1e-4, atol=1e-6)
    assert stacked_loss_of(torch.nn.Linear(2, 2), "cross_entropy") is None
