"""Oracle: attribution patching (`interp.dissect.attribution`).

* Where the metric is linear in the patched activation, the first-order estimate is exact, so
  it must equal activation patching (`patch_sweep`, itself checked against TransformerLens):
  without a final LayerNorm at the last layer's `resid_post` and `mlp_out`, and, when the last
  MLP's output does not depend on its input, also at that layer's `attn_out`, `z`, `z_pos` and
  `pattern`.
* Everywhere, each estimate must equal an independent computation: the derivative with respect
  to a scalar ``alpha`` of the metric when plain `register_forward_hook` hooks move the
  activation slice from its target value towards its source value by ``alpha``.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import tasks
from interp.dissect import patching
from interp.dissect.attribution import attribution_sweep
from interp.dissect.patching import SITES, PatchPairs, aligned_pairs, patch_sweep
from tests.oracle.oracle_models import random_transformer  # tests/oracle/oracle_models.py

ATOL = 1e-5
TASK = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32)
LAST = 1  # the last layer of the 2-layer models


@pytest.fixture(scope="module")
def pairs() -> PatchPairs:
    adv = TASK.splits(0)["adv"]
    partner = tasks.counterfactual(TASK, adv, flip="label")
    return aligned_pairs(partner, adv, keep=partner.extras["valid"])


def _constant_last_mlp(model):
    with torch.no_grad():
        model.blocks[LAST].mlp.W_in.zero_()  # the MLP now outputs the same vector for every input
    return model


@pytest.mark.parametrize(
    "sites, constant_mlp",
    [
        (["resid_post", "mlp_out"], False),
        (["resid_post", "mlp_out", "attn_out", "z", "z_pos", "pattern"], True),
    ],
)
def test_exact_where_the_metric_is_linear(pairs, sites, constant_mlp):
    model = random_transformer(TASK, seed=2, normalization_type=None)
    model = _constant_last_mlp(model) if constant_mlp else model
    estimate = attribution_sweep(model, pairs, sites)
    actual = patch_sweep(model, pairs, sites)
    for site in sites:
        got, want = estimate.effects[site], actual.effects[site]
        torch.testing.assert_close(got.logit_diff[LAST], want.logit_diff[LAST], atol=ATOL, rtol=0, msg=site)
        torch.testing.assert_close(
            got.per_example[LAST], want.per_example[LAST], atol=5 * ATOL, rtol=0, msg=site
        )
    assert estimate.target_logit_diff == pytest.approx(actual.target_logit_diff, abs=ATOL)


def test_not_exact_where_the_metric_is_not_linear(pairs):
    # The final LayerNorm makes even the last resid_post nonlinear: the oracle above is not vacuous.
    model = random_transformer(TASK, seed=2)
    estimate, actual = (
        attribution_sweep(model, pairs, ["resid_post"]),
        patch_sweep(model, pairs, ["resid_post"]),
    )
    assert (
        estimate.effects["resid_post"].logit_diff - actual.effects["resid_post"].logit_diff
    ).abs().max() > 1e-3


def _directional_derivative(model, pairs: PatchPairs, site: str, index: tuple[int, ...]) -> torch.Tensor:
    """d/d alpha_i of pair i's logit difference when the slice moves by alpha_i (source - target), at 0."""
    template, _, to_index = SITES[site]
    layer, *rest = index
    module = dict(model.named_modules())[template.format(layer)]
    recorded = {}
    for name, tokens in (("source", pairs.source_tokens), ("target", pairs.target_tokens)):
        handle = module.register_forward_hook(
            lambda mod, inp, out, name=name: recorded.setdefault(name, out.detach())
        )
        try:
            with torch.no_grad():
                model(tokens)
        finally:
            handle.remove()
    mask = torch.zeros_like(recorded["target"])
    mask[(slice(None), *to_index(*rest))] = 1.0
    delta = mask * (recorded["source"] - recorded["target"])
    alpha = torch.zeros(len(pairs), *[1] * (delta.ndim - 1), requires_grad=True)
    handle = module.register_forward_hook(lambda mod, inp, out: out + alpha * delta)
    try:
        logits = model(pairs.target_tokens)[:, -1]
    finally:
        handle.remove()
    ld = patching.example_logit_diff(logits, pairs.source_labels, pairs.target_labels)
    (grad,) = torch.autograd.grad(ld.sum(), alpha)
    return grad.flatten()


@pytest.mark.parametrize("site", list(SITES))
def test_every_estimate_is_the_directional_derivative(pairs, site):
    model = random_transformer(TASK, seed=0)
    few = pairs.head(12)
    sweep = attribution_sweep(model, few, [site], max_pairs=5)  # chunks of 5: 5 + 5 + 2 pairs
    effect = sweep.effects[site]
    shape = patching.site_shape(model, site, TASK.n_ctx)
    for index in itertools.product(*map(range, shape)):
        want = sweep.target_per_example + _directional_derivative(model, few, site, index)
        torch.testing.assert_close(effect.per_example[index], want, atol=ATOL, rtol=0, msg=f"{site}{index}")
    torch.testing.assert_close(effect.logit_diff, effect.per_example.mean(-1), atol=1e-6, rtol=0)


def test_a_self_pairing_attributes_exactly_nothing(pairs):
    model = random_transformer(TASK, seed=1)
    own = PatchPairs(pairs.target_tokens, pairs.target_tokens, pairs.source_labels, pairs.target_labels)
    sweep = attribution_sweep(model, own)
    for effect in sweep.effects.values():
        assert (effect.per_example == sweep.target_per_example).all()


def test_frozen_weights_still_give_gradients_with_respect_to_activations(pairs):
    model = random_transformer(TASK, seed=1)
    expected = attribution_sweep(model, pairs, ["resid_pre", "z"])
    for p in model.parameters():
        p.requires_grad_(False)
    frozen = attribution_sweep(model, pairs, ["resid_pre", "z"])
    for site in ("resid_pre", "z"):
        torch.testing.assert_close(
            frozen.effects[site].per_example, expected.effects[site].per_example, atol=1e-6, rtol=0
        )
