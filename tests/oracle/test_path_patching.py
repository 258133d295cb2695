"""Oracle: path patching (`interp.dissect.path_patching`) against the explicit two-pass computation.

The oracle freezes components with plain `register_forward_hook` hooks: pass 1 runs the target
input with the sender head's z taken from the source run and every other head's z and every
MLP's output taken from the target run, recording the receiver's q / k / v (or, for the
``logits`` receiver, the output itself); pass 2 runs the target input with only the receiver
head's q / k / v replaced by pass 1's. The library computes pass 1 as one residual-stream write;
the two must agree (1e-5), per pair.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import tasks
from interp.dissect.patching import PatchPairs, aligned_pairs, cross_pairs, example_logit_diff, patch_sweep
from interp.dissect.path_patching import path_patch
from tests.oracle.oracle_models import random_transformer  # tests/oracle/oracle_models.py

ATOL = 1e-5
TASK = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32)


@pytest.fixture(scope="module")
def pairs() -> PatchPairs:
    adv = TASK.splits(0)["adv"]
    partner = tasks.counterfactual(TASK, adv, flip="label")
    return aligned_pairs(partner, adv, keep=partner.extras["valid"]).head(16)


@contextlib.contextmanager
def _raw_hooks(model, hooks: dict):
    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_hook(fn) for name, fn in hooks.items()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _record(model, tokens, names):
    out = {}
    with (
        _raw_hooks(model, {n: (lambda m, i, o, n=n: out.setdefault(n, o.detach().clone())) for n in names}),
        torch.no_grad(),
    ):
        model(tokens)
    return out


def _replace_head(value, head):
    def hook(module, inputs, output):
        output = output.clone()
        output[:, :, head] = value[:, :, head]
        return output

    return hook


def _two_pass(
    model, pairs: PatchPairs, sender: tuple[int, int], receiver: tuple[int, int, str] | None
) -> torch.Tensor:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    z = [f"blocks.{layer}.attn.hook_z" for layer in range(n_layers)]
    mlp = [f"blocks.{layer}.hook_mlp_out" for layer in range(n_layers)]
    qkv = [f"blocks.{layer}.attn.hook_{k}" for layer in range(n_layers) for k in "qkv"]
    source, target = (
        _record(model, pairs.source_tokens, z),
        _record(model, pairs.target_tokens, z + mlp + qkv),
    )
    frozen_z = {}
    for layer in range(n_layers):
        value = target[z[layer]].clone()
        if layer == sender[0]:
            value[:, :, sender[1]] = source[z[layer]][:, :, sender[1]]
        frozen_z[z[layer]] = lambda m, i, o, value=value: value  # every other head frozen, the sender patched
    frozen_mlp = {name: (lambda m, i, o, value=target[name]: value) for name in mlp}
    recorded = {}
    hooks = {**frozen_z, **frozen_mlp}
    if receiver is not None:
        name = f"blocks.{receiver[0]}.attn.hook_{receiver[2]}"
        hooks[name] = lambda m, i, o, name=name: (recorded.setdefault(name, o.detach().clone()), None)[1]
        assert n_heads > receiver[1]
    with _raw_hooks(model, hooks), torch.no_grad():
        logits = model(pairs.target_tokens)
    if receiver is not None:
        with _raw_hooks(model, {name: _replace_head(recorded[name], receiver[1])}), torch.no_grad():
            logits = model(pairs.target_tokens)
    return example_logit_diff(logits[:, -1], pairs.source_labels, pairs.target_labels)


@pytest.mark.parametrize(
    "config",
    [dict(n_layers=2, n_heads=2), dict(n_layers=3, n_heads=2, normalization_type=None)],
    ids=["2l2h-ln", "3l2h-noln"],
)
def test_every_path_equals_the_explicit_two_pass_computation(pairs, config):
    model = random_transformer(TASK, seed=4, **config)
    effects = path_patch(model, pairs)
    assert len(effects.senders) == config["n_layers"] * 2
    for s, sender in enumerate(effects.senders):
        layer_s, head_s = int(sender[1]), int(sender[3])
        for r, receiver in enumerate(effects.receivers):
            got = effects.per_example[s, r]
            if receiver == "logits":
                want = _two_pass(model, pairs, (layer_s, head_s), None)
            else:
                layer_r, head_r, kind = int(receiver[1]), int(receiver[3]), receiver[-1]
                if layer_r <= layer_s:
                    assert got.isnan().all(), f"no path {sender} -> {receiver}"
                    continue
                want = _two_pass(model, pairs, (layer_s, head_s), (layer_r, head_r, kind))
            torch.testing.assert_close(got, want, atol=ATOL, rtol=0, msg=f"{sender} -> {receiver}")
    torch.testing.assert_close(effects.logit_diff, effects.per_example.mean(-1), equal_nan=True)


def test_last_layer_heads_to_logits_equal_activation_patching_of_z_when_the_last_mlp_is_constant(pairs):
    # A last-layer head reaches the logits directly and through the last MLP; with that MLP's
    # output independent of its input only the direct path is left, so path patching the head into
    # the logits is activation patching its z.
    model = random_transformer(TASK, seed=5)
    with torch.no_grad():
        model.blocks[1].mlp.W_in.zero_()
    effects = path_patch(model, pairs, "logits")
    z = patch_sweep(model, pairs, ["z"]).effects["z"].logit_diff
    torch.testing.assert_close(effects.logit_diff[2:, 0], z[1], atol=ATOL, rtol=0)


def test_self_pairs_change_nothing_and_bad_receivers_are_refused(pairs):
    model = random_transformer(TASK, seed=1)
    own = PatchPairs(pairs.target_tokens, pairs.target_tokens, pairs.source_labels, pairs.target_labels)
    effects = path_patch(model, own, "q,v,logits")
    valid = ~effects.logit_diff.isnan()
    torch.testing.assert_close(
        effects.logit_diff[valid],
        torch.full((int(valid.sum()),), effects.target_logit_diff),
        atol=ATOL,
        rtol=0,
    )
    with pytest.raises(Exception, match="did you mean 'logits'"):
        path_patch(model, pairs, "logit")


def test_cross_split_pairs(pairs):
    splits = TASK.splits(0)
    model = random_transformer(TASK, seed=6)
    cross = cross_pairs(splits["val"], splits["adv"]).head(10)
    effects = path_patch(model, cross, "k")
    want = _two_pass(model, cross, (0, 1), (1, 0, "k"))
    torch.testing.assert_close(
        effects.per_example[1, effects.receivers.index("L1H0.k")], want, atol=ATOL, rtol=0
    )
