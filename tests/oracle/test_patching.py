"""Oracle: `interp.dissect.patching` against TransformerLens's `patching` and against raw torch hooks.

Every site's effect tensor must equal what TransformerLens's `get_act_patch_*` functions give
with the same metric on the same model and inputs, and what a plain `register_forward_hook`
loop gives; plus the identities of patching (self-patching changes nothing; patching the
whole residual stream at layer 0 reproduces the source run).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from transformer_lens import patching as tl_patching

import models
import tasks
from interp.dissect import patching
from interp.dissect.interventions import Intervention, run_interventions
from interp.dissect.patching import SITES, PatchPairs, aligned_pairs, cross_pairs, patch_sweep
from interp.errors import ConfigError
from tests.oracle.oracle_models import random_transformer  # tests/oracle/oracle_models.py

ATOL = 1e-5
TASK = tasks.MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)

# site -> TransformerLens function with the same layout (resid_post has none: generic patch)
TL_FUNCTIONS = {
    "resid_pre": tl_patching.get_act_patch_resid_pre,
    "resid_mid": tl_patching.get_act_patch_resid_mid,
    "attn_out": tl_patching.get_act_patch_attn_out,
    "mlp_out": tl_patching.get_act_patch_mlp_out,
    "z": tl_patching.get_act_patch_attn_head_out_all_pos,
    "z_pos": tl_patching.get_act_patch_attn_head_out_by_pos,
    "pattern": tl_patching.get_act_patch_attn_head_pattern_all_pos,
}


def _tl_resid_post(model, corrupted_tokens, clean_cache, metric):
    return tl_patching.generic_activation_patch(
        model,
        corrupted_tokens,
        clean_cache,
        metric,
        patch_setter=tl_patching.layer_pos_patch_setter,
        activation_name="resid_post",
        index_axis_names=("layer", "pos"),
    )


TL_FUNCTIONS["resid_post"] = _tl_resid_post


def _model(seed: int = 0, **overrides) -> models.Transformer:
    return random_transformer(TASK, seed, **overrides)


@pytest.fixture(scope="module")
def model() -> models.Transformer:
    return _model()


@pytest.fixture(scope="module")
def splits():
    return TASK.splits(0)


@pytest.fixture(scope="module")
def pairs(splits) -> PatchPairs:
    partner = tasks.counterfactual(TASK, splits["adv"], flip="label")
    return aligned_pairs(partner, splits["adv"], keep=partner.extras["valid"])


@pytest.fixture(scope="module")
def sweep(model, pairs):
    return patch_sweep(model, pairs, list(SITES))


def _metric(pairs: PatchPairs):
    def metric(logits: torch.Tensor) -> torch.Tensor:
        return patching.logit_diff(logits[:, -1], pairs.source_labels, pairs.target_labels)

    return metric


@pytest.mark.parametrize("site", list(SITES))
def test_logit_diff_equals_transformer_lens(model, pairs, sweep, site):
    _, cache = model.run_with_cache(pairs.source_tokens)
    expected = TL_FUNCTIONS[site](model, pairs.target_tokens, cache, _metric(pairs))
    got = sweep.effects[site].logit_diff
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("site", ["resid_pre", "z"])
def test_recovery_and_accuracy_equal_transformer_lens(model, pairs, sweep, site):
    _, cache = model.run_with_cache(pairs.source_tokens)
    ld = _metric(pairs)
    clean, corrupt = ld(model(pairs.source_tokens)), ld(model(pairs.target_tokens))
    assert sweep.source_logit_diff == pytest.approx(clean.item(), abs=ATOL)
    assert sweep.target_logit_diff == pytest.approx(corrupt.item(), abs=ATOL)

    def recovery(logits):
        return (ld(logits) - corrupt) / (clean - corrupt)

    def acc(logits):
        return (logits[:, -1].argmax(-1) == pairs.source_labels).float().mean()

    expected_recovery = TL_FUNCTIONS[site](model, pairs.target_tokens, cache, recovery)
    expected_accuracy = TL_FUNCTIONS[site](model, pairs.target_tokens, cache, acc)
    torch.testing.assert_close(sweep.effects[site].recovery, expected_recovery, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(sweep.effects[site].accuracy, expected_accuracy, atol=ATOL, rtol=0)


def _raw_patch(model, pairs: PatchPairs, site: str) -> torch.Tensor:
    """The same sweep with plain `register_forward_hook` on the hook modules, one run per index."""
    template, _, to_index = SITES[site]
    modules = dict(model.named_modules())
    n_pos = pairs.target_tokens.shape[1]
    shape = patching.site_shape(model, site, n_pos)
    out = torch.empty(shape)
    for layer, *rest in itertools.product(*map(range, shape)):
        name = template.format(layer)
        recorded = {}
        handle = modules[name].register_forward_hook(
            lambda mod, inp, output: recorded.setdefault("act", output.clone())
        )
        try:
            model(pairs.source_tokens)
        finally:
            handle.remove()
        index = (slice(None), *to_index(*rest))

        def overwrite(mod, inp, output, index=index, source=recorded["act"]):
            output = output.clone()
            output[index] = source[index]
            return output

        handle = modules[name].register_forward_hook(overwrite)
        try:
            with torch.no_grad():
                logits = model(pairs.target_tokens)
        finally:
            handle.remove()
        out[(layer, *rest)] = _metric(pairs)(logits)
    return out


@pytest.mark.parametrize("site", ["resid_pre", "resid_post", "mlp_out", "z", "z_pos", "pattern"])
def test_logit_diff_equals_raw_torch_hooks(model, pairs, sweep, site):
    torch.testing.assert_close(
        sweep.effects[site].logit_diff, _raw_patch(model, pairs, site), atol=ATOL, rtol=0
    )


def test_self_patching_changes_nothing(model, splits):
    adv = splits["adv"]
    labels = (adv.labels + 1) % TASK.m  # any labels: only the logit difference is compared
    own = PatchPairs(adv.tokens, adv.tokens, adv.labels, labels)
    result = patch_sweep(model, own, list(SITES))
    assert result.source_logit_diff == result.target_logit_diff
    for site, effect in result.effects.items():
        torch.testing.assert_close(
            effect.logit_diff,
            torch.full_like(effect.logit_diff, result.target_logit_diff),
            atol=ATOL,
            rtol=0,
            msg=site,
        )
        assert effect.recovery.isnan().all(), "recovery is undefined when source and target tie"


def test_patching_all_of_resid_pre_at_layer_0_reproduces_the_source(model, pairs):
    _, cache = model.run_with_cache(pairs.source_tokens)
    everything = Intervention("blocks.0.hook_resid_pre", (), cache["blocks.0.hook_resid_pre"])
    logits = run_interventions(model, pairs.target_tokens, [everything])[0]
    source_logits = model(pairs.source_tokens)[:, -1]
    torch.testing.assert_close(logits, source_logits, atol=ATOL, rtol=0)
    labels = (pairs.source_labels, pairs.target_labels)
    ld = patching.logit_diff(logits, *labels)
    rec = patching.recovery(
        ld,
        patching.logit_diff(source_logits, *labels).item(),
        patching.logit_diff(model(pairs.target_tokens)[:, -1], *labels).item(),
    )
    assert rec.item() == pytest.approx(1.0, abs=1e-4)


def test_patching_a_position_where_the_pair_agrees_at_layer_0_does_nothing(model, pairs, sweep):
    changed = (pairs.source_tokens != pairs.target_tokens).any(0)
    same = torch.nonzero(~changed).flatten()
    assert len(same) > 0  # SEP at least
    effect = sweep.effects["resid_pre"].logit_diff[0, same]
    torch.testing.assert_close(effect, torch.full_like(effect, sweep.target_logit_diff), atol=ATOL, rtol=0)


@pytest.mark.parametrize("max_rows", [7, 40, 10_000])
def test_batching_does_not_change_results(model, pairs, sweep, max_rows):
    small = patch_sweep(model, pairs, ["resid_mid", "z_pos"], max_rows=max_rows)
    for site in ("resid_mid", "z_pos"):
        torch.testing.assert_close(
            small.effects[site].logit_diff, sweep.effects[site].logit_diff, atol=ATOL, rtol=0
        )


def test_bidirectional_model_matches_transformer_lens(pairs):
    model = _model(seed=3, n_layers=1, n_heads=4, attention_dir="bidirectional")
    _, cache = model.run_with_cache(pairs.source_tokens)
    got = patch_sweep(model, pairs, ["resid_pre", "z"])
    for site in ("resid_pre", "z"):
        expected = TL_FUNCTIONS[site](model, pairs.target_tokens, cache, _metric(pairs))
        torch.testing.assert_close(got.effects[site].logit_diff, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("label", ["sum-mod2", "sum-mod3"])
def test_cross_pairs_differ_in_label_use_rows_once_and_are_seeded(label):
    task = tasks.MPSPTask(label=label, vocab=12, n=4, n_train=64, n_val=60, n_adv=45)
    s = task.splits(0)
    pairs = cross_pairs(s["val"], s["adv"], seed=5)
    assert len(pairs) == 45  # balanced labels: every target row is used
    assert (pairs.source_labels != pairs.target_labels).all()
    for tokens in (pairs.source_tokens, pairs.target_tokens):
        assert max(Counter(map(tuple, tokens.tolist())).values()) == 1
    again, other = cross_pairs(s["val"], s["adv"], seed=5), cross_pairs(s["val"], s["adv"], seed=6)
    assert torch.equal(again.source_tokens, pairs.source_tokens) and torch.equal(
        again.target_tokens, pairs.target_tokens
    )
    assert not torch.equal(other.source_tokens, pairs.source_tokens)


def test_bad_site_names_say_what_is_valid():
    with pytest.raises(ConfigError, match="resid_pre"):
        patching.parse_sites("resid_per")


def test_hooks_outside_blocks_patch_copied_inputs(model, pairs):
    # hook_embed is before every block: the engine copies the inputs instead of a block's batch.
    _, cache = model.run_with_cache(pairs.source_tokens)
    embed = Intervention("hook_embed", (), cache["hook_embed"])
    at_layer_0 = Intervention("blocks.0.hook_resid_pre", (2,), cache["blocks.0.hook_resid_pre"][:, 2])
    both = patching.run_interventions(model, pairs.target_tokens, [embed, at_layer_0], max_rows=20)
    torch.testing.assert_close(both[0], model(pairs.source_tokens)[:, -1], atol=ATOL, rtol=0)
    expected = TL_FUNCTIONS["resid_pre"](
        model, pairs.target_tokens, cache, lambda logits: logits[:, -1, 0].sum()
    )
    torch.testing.assert_close(both[1, :, 0].sum(), expected[0, 2], atol=1e-4, rtol=0)
