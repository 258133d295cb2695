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

