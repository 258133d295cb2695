"""Oracle: the split inputs (`use_split_qkv_input`, `use_hook_mlp_in`) against TransformerLens 3.9.

With the flags on in both models and the same weights, every cached activation (the new
`hook_q_input`, `hook_k_input`, `hook_v_input`, `hook_mlp_in` included) and the logits must
agree to 1e-5; the flags change no value of our own model; a write at one head's query input
changes that head alone, as in TransformerLens; and the new hooks cannot fail silently.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformer_lens import HookedTransformer

from interp.config import to_dict
from interp.dissect.hooks import cache_activations, run_with_checked_hooks
from interp.errors import HookError
from models import TransformerConfig
from models.transformer import Transformer
from tests.oracle.oracle_models import pair_tokens, transformer_lens_pair

ATOL = 1e-5
FLAGS = dict(use_split_qkv_input=True, use_hook_mlp_in=True)
CONFIGS = {
    "2l2h-ln": dict(n_layers=2, n_heads=2),
    "2l2h-noln-gelu": dict(n_layers=2, n_heads=2, normalization_type=None, act_fn="gelu"),
    "1l4h-bidirectional-result": dict(
        n_layers=1, n_heads=4, attention_dir="bidirectional", use_attn_result=True
    ),
}
NEW_HOOKS = ("hook_q_input", "hook_k_input", "hook_v_input", "hook_mlp_in")


def _pair(overrides: dict, seed: int = 0) -> tuple[HookedTransformer, Transformer]:
    return transformer_lens_pair({**overrides, **FLAGS}, seed)


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def pair(request):
    return _pair(CONFIGS[request.param])


def test_flags_reach_transformer_lens_and_back(pair):
    tl_model, ours = pair
    assert tl_model.cfg.use_split_qkv_input and tl_model.cfg.use_hook_mlp_in
    assert ours.cfg.use_split_qkv_input and ours.cfg.use_hook_mlp_in


def test_every_cached_activation_and_the_logits_match_transformer_lens(pair):
    tl_model, ours = pair
    tokens = pair_tokens()
    tl_logits, tl_cache = tl_model.run_with_cache(tokens)
    logits, cache = ours.run_with_cache(tokens)
    torch.testing.assert_close(logits, tl_logits, atol=ATOL, rtol=0)
    assert set(cache.keys()) == set(tl_cache.keys())
    for layer in range(ours.cfg.n_layers):
        for hook in NEW_HOOKS:
            assert f"blocks.{layer}.{hook}" in cache.keys(), hook
        assert cache[f"blocks.{layer}.hook_q_input"].shape == (8, 6, ours.cfg.n_heads, 32)
    for name in tl_cache.keys():
        torch.testing.assert_close(cache[name], tl_cache[name], atol=ATOL, rtol=0, msg=name)


def test_a_write_at_one_heads_query_input_matches_transformer_lens(pair):
    tl_model, ours = pair
    tokens = pair_tokens(seed=2)
    noise = torch.randn(8, 6, 32, generator=torch.Generator().manual_seed(3))

    def write(act, hook):
        act = act.clone()
        act[:, :, 0] += noise  # head 0 only
        return act

    hooks = [("blocks.0.hook_q_input", write), ("blocks.0.hook_mlp_in", lambda act, hook: act * 0.5)]
    expected = tl_model.run_with_hooks(tokens, fwd_hooks=hooks)
    got = run_with_checked_hooks(ours, tokens, hooks)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    assert (got - ours(tokens)).abs().max() > 1e-3  # the write mattered


def test_the_flags_change_no_value():
    cfg = TransformerConfig(n_layers=2, n_heads=2, d_model=32, d_mlp=64, n_ctx=6, d_vocab=17, d_vocab_out=3)
    plain = Transformer(cfg, seed=4)
    split = Transformer(dataclasses.replace(cfg, **FLAGS), seed=4)
    tokens = pair_tokens(seed=5)
    torch.testing.assert_close(split(tokens), plain(tokens), atol=ATOL, rtol=0)
    torch.testing.assert_close(split.fast_readout(tokens), plain.readout(tokens), atol=ATOL, rtol=0)


def test_flags_off_leave_stored_configs_as_they_were():
    cfg = TransformerConfig(n_layers=1, n_heads=1, d_model=8, d_mlp=8, n_ctx=3, d_vocab=4, d_vocab_out=2)
    assert not set(FLAGS) & set(to_dict(cfg))
    assert to_dict(dataclasses.replace(cfg, **FLAGS)).items() >= FLAGS.items()


@pytest.mark.parametrize("hook", NEW_HOOKS)
def test_split_input_hooks_without_their_flag_fail_loudly(hook):
    cfg = TransformerConfig(n_layers=1, n_heads=2, d_model=8, d_mlp=8, n_ctx=3, d_vocab=4, d_vocab_out=2)
    with pytest.raises(HookError, match=rf"'blocks\.0\.{hook}'.*never fired"):
        cache_activations(Transformer(cfg), pair_tokens()[:, :3] % 4, [f"blocks.0.{hook}"])
