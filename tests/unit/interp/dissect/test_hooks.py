"""Hooks that cannot fail silently (`interp.dissect.hooks`), and what the dissection primitives
built on them guarantee: every hook they register fires or they raise naming it; the caller's
own hooks survive them, also when a hook or the primitive raises; a no-op patch reproduces the
unpatched logits bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import models
import tasks
from interp.dissect import ablation, interventions, patching, pruning
from interp.dissect.hooks import cache_activations, checked_hooks, run_with_checked_hooks
from interp.dissect.interventions import Intervention, run_interventions
from interp.dissect.patching import SITES, PatchPairs, aligned_pairs, hook_name, patch_sweep
from interp.errors import HookError
from tests.builders import tiny_config

TASK = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32)


def _model(**overrides) -> models.Transformer:
    cfg = tiny_config(TASK, **overrides)
    return models.Transformer(cfg, seed=0).eval()


@pytest.fixture
def model() -> models.Transformer:
    return _model()


@pytest.fixture(scope="module")
def pairs() -> PatchPairs:
    adv = TASK.splits(0)["adv"]
    partner = tasks.counterfactual(TASK, adv, flip="label")
    return aligned_pairs(partner, adv, keep=partner.extras["valid"])


def _n_hooks(model: nn.Module) -> int:
    return sum(len(hp.fwd_hooks) for hp in model.hook_dict.values())


def _disconnect(model: nn.Module, name: str) -> None:
    """Take hook point `name` off the forward path, as replacing a module after `setup()` does:
    `hook_dict` still holds the old HookPoint, but the forward pass no longer calls it.
    """
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, nn.Identity())


def test_unknown_hook_names_are_refused_with_did_you_mean(model, pairs):
    with pytest.raises(HookError, match="blocks.1.hook_resid_pre"):
        with checked_hooks(model, [("blocks.1.hook_resid_per", lambda act, hook: act)]):
            pass
    bad = Intervention("blocks.7.hook_resid_pre", (0,), torch.zeros(()))
    with pytest.raises(HookError, match="blocks.7.hook_resid_pre"):
        run_interventions(model, pairs.target_tokens, [bad])
    assert _n_hooks(model) == 0


def test_a_hook_that_never_fires_is_named(pairs):
    no_result = _model()  # use_attn_result=False: hook_result exists but is never called
    write = Intervention("blocks.0.attn.hook_result", (slice(None), 0), torch.zeros(()))
    with pytest.raises(HookError, match=r"'blocks\.0\.attn\.hook_result'.*never fired"):
        run_interventions(no_result, pairs.target_tokens, [write])
    assert _n_hooks(no_result) == 0


@pytest.mark.parametrize("site", ["z", "resid_mid", "pattern"])
def test_patching_a_disconnected_hook_point_raises_naming_it(pairs, site):
    model = _model()
    _disconnect(model, hook_name(site, 1))
    with pytest.raises(HookError, match=hook_name(site, 1).replace(".", r"\.")):
        patch_sweep(model, pairs, [site])
    assert _n_hooks(model) == 0


def test_ablation_and_caching_raise_on_a_disconnected_hook_point(pairs):
    model = _model()
    _disconnect(model, "blocks.1.hook_mlp_out")
    with pytest.raises(HookError, match=r"blocks\.1\.hook_mlp_out"):
        ablation.ablate(model, pairs.target_tokens, pairs.target_labels, "mean")
    with pytest.raises(HookError, match=r"blocks\.1\.hook_mlp_out"):
        cache_activations(model, pairs.target_tokens, ["blocks.0.hook_mlp_out", "blocks.1.hook_mlp_out"])


def test_pruning_through_a_forward_that_skips_hooks_raises():
    task = tasks.ModAddTask(p=7, train_frac=0.6)
    mlp = models.build_model(models.preset_config("quadratic-mlp", task, d_hidden=8))
    with pytest.raises(HookError, match="hook_post"):
        pruning.prune_curve(mlp, torch.arange(8), task.splits(0), fractions=[0.5], readout=mlp.fast_readout)


def _counting_hook(counter: list[int]):
    def hook(act, hook):
        counter.append(1)

    return hook


def test_the_callers_hooks_survive_a_sweep(model, pairs):
    counter: list[int] = []
    model.add_hook("blocks.0.hook_resid_pre", _counting_hook(counter))
    try:
        patch_sweep(model, pairs, list(SITES))
        ablation.ablate(model, pairs.target_tokens, pairs.target_labels)
        assert _n_hooks(model) == 1, "only the caller's hook is left"
        before = len(counter)
        model(pairs.target_tokens)
        assert len(counter) == before + 1, "and it still fires"
    finally:
        model.reset_hooks()


def test_the_callers_context_hooks_survive_and_stay_active(model, pairs):
    counter: list[int] = []
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_post", _counting_hook(counter))]):
        patch_sweep(model, pairs, ["resid_pre"])
        assert _n_hooks(model) == 1
        ran = len(counter)
        model(pairs.target_tokens)
        assert len(counter) == ran + 1
    assert _n_hooks(model) == 0


def test_an_exception_in_the_callers_hook_propagates_and_leaves_only_the_callers_hook(model, pairs):
    calls: list[int] = []

    def fails_on_third_call(act, hook):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("caller's hook failed")

    model.add_hook("blocks.1.hook_resid_mid", fails_on_third_call)
    try:
        with pytest.raises(RuntimeError, match="caller's hook failed"):
            patch_sweep(model, pairs, ["resid_pre", "z"], max_rows=8)
        assert _n_hooks(model) == 1
    finally:
        model.reset_hooks()


def test_an_exception_in_an_analysis_hook_leaves_the_callers_hooks(model, pairs, monkeypatch):
    def broken_write_hook(writes):
        def hook(act, hook):
            raise ValueError("analysis hook failed")

        return hook

    monkeypatch.setattr(interventions, "_write_hook", broken_write_hook)
    counter: list[int] = []
    model.add_hook("blocks.0.hook_resid_pre", _counting_hook(counter))
    try:
        with pytest.raises(ValueError, match="analysis hook failed"):
            patch_sweep(model, pairs, ["z"])
        assert _n_hooks(model) == 1
        model(pairs.target_tokens)
        assert counter, "the caller's hook still fires"
    finally:
        model.reset_hooks()


def test_an_exception_after_the_forward_pass_leaves_no_hook(model, pairs, monkeypatch):
    def broken_metric(*args, **kwargs):
        raise ArithmeticError("metric failed")

    monkeypatch.setattr(patching, "example_logit_diff", broken_metric)
    with pytest.raises(ArithmeticError):
        patch_sweep(model, pairs, ["resid_pre"])
    assert _n_hooks(model) == 0


@pytest.mark.parametrize("site", list(SITES))
def test_a_no_op_patch_reproduces_the_clean_logits_bit_for_bit(model, pairs, site):
    tokens = pairs.target_tokens
    clean = model(tokens)[:, -1]
    _, cache = cache_activations(model, tokens, [hook_name(site, layer) for layer in range(2)])
    no_ops = patching.patch_interventions(model, site, cache, tokens.shape[1])
    patched = run_interventions(model, tokens, no_ops, max_rows=3 * len(tokens))  # copies share passes
    for logits in patched:
        assert torch.equal(logits, clean)


def test_self_patching_reproduces_the_target_logit_difference_exactly(model, pairs):
    own = PatchPairs(pairs.target_tokens, pairs.target_tokens, pairs.source_labels, pairs.target_labels)
    sweep = patch_sweep(model, own, list(SITES))
    for effect in sweep.effects.values():
        assert (effect.logit_diff == sweep.target_logit_diff).all()


def test_checked_runs_leave_the_output_unchanged(model, pairs):
    tokens = pairs.target_tokens
    assert torch.equal(
        run_with_checked_hooks(model, tokens, [("hook_embed", lambda act, hook: None)]), model(tokens)
    )
