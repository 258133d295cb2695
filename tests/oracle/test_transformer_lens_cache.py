"""Oracle: TransformerLens's `ActivationCache` analysis methods on our `Transformer` against the same
methods on TransformerLens 3.9's `HookedTransformer` holding the same weights.

Each method (`decompose_resid`, `get_full_resid_decomposition`, `logit_attrs`,
`stack_neuron_results`, `accumulated_resid` with `apply_ln`, `stack_head_results`) and the model
methods they rely on (`tokens_to_residual_directions`, `accumulated_bias`) must give equal
tensors (1e-5, fp32) and equal labels on both models.
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens import HookedTransformer

from models import TransformerConfig
from models.convert import from_transformer_lens, to_transformer_lens_config

ATOL = 1e-5
N_CTX, D_VOCAB, D_OUT = 6, 17, 3
CONFIGS = {
    "2l2h-ln": dict(n_layers=2, n_heads=2),
    "2l2h-noln-gelu": dict(n_layers=2, n_heads=2, normalization_type=None, act_fn="gelu"),
    "1l4h-bidirectional": dict(n_layers=1, n_heads=4, attention_dir="bidirectional"),
}


def _pair(overrides: dict, seed: int = 0):
    cfg = TransformerConfig(
        d_model=32, d_mlp=64, n_ctx=N_CTX, d_vocab=D_VOCAB, d_vocab_out=D_OUT, **overrides
    )
    torch.manual_seed(seed)
    tl_model = HookedTransformer(to_transformer_lens_config(cfg))
    with torch.no_grad():  # non-zero biases and LayerNorm weights, so every term is tested
        for name, p in tl_model.named_parameters():
            if not name.split(".")[-1].startswith("W_"):
                p.add_(0.1 * torch.randn_like(p))
    return tl_model.eval(), from_transformer_lens(tl_model).eval()


@pytest.fixture(scope="module", params=list(CONFIGS), ids=list(CONFIGS))
def caches(request):
    tl_model, ours = _pair(CONFIGS[request.param])
    tokens = torch.randint(0, D_VOCAB, (5, N_CTX), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, tl_cache = tl_model.run_with_cache(tokens)
        _, cache = ours.run_with_cache(tokens)
    return tl_model, ours, tl_cache, cache


def _same(ours, theirs):
    """Equal tensors (or (tensor, labels) pairs) to 1e-5."""
    if isinstance(theirs, tuple):
        assert ours[1] == theirs[1]
        ours, theirs = ours[0], theirs[0]
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def _both(caches, method: str, *args, **kwargs):
    _, _, tl_cache, cache = caches
    with torch.no_grad():
        _same(getattr(cache, method)(*args, **kwargs), getattr(tl_cache, method)(*args, **kwargs))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"return_labels": True},
        {"layer": 0, "mlp_input": True, "return_labels": True},
        {"mode": "attn", "apply_ln": True},
        {"mode": "mlp", "incl_embeds": False, "pos_slice": -1},
        {"apply_ln": True, "pos_slice": -1, "return_labels": True},
    ],
)
def test_decompose_resid(caches, kwargs):
    _both(caches, "decompose_resid", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"return_labels": True},
        {"expand_neurons": False, "return_labels": True},
        {"expand_neurons": True, "apply_ln": True, "pos_slice": -1, "return_labels": True},
        {"layer": 0, "mlp_input": True, "expand_neurons": False, "apply_ln": True},
    ],
)
def test_get_full_resid_decomposition(caches, kwargs):
    _both(caches, "get_full_resid_decomposition", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"layer": 1, "return_labels": True},
        {"layer": -1, "apply_ln": True, "pos_slice": -1},
        {"layer": -1, "incl_remainder": True, "return_labels": True},
    ],
)
def test_stack_neuron_results(caches, kwargs):
    _both(caches, "stack_neuron_results", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"apply_ln": True, "return_labels": True},
        {"apply_ln": True, "incl_mid": True, "pos_slice": -1},
        {"layer": 0, "mlp_input": True, "apply_ln": True},
    ],
)
def test_accumulated_resid(caches, kwargs):
    _both(caches, "accumulated_resid", **kwargs)


def test_stack_head_results_with_ln(caches):
    _both(caches, "stack_head_results", return_labels=True, apply_ln=True, pos_slice=-1)


@pytest.mark.parametrize("tokens", [2, torch.tensor(1), torch.tensor([0, 2, 1, 1, 0])])
def test_tokens_to_residual_directions_of_class_labels(caches, tokens):
    tl_model, ours, _, _ = caches
    _same(ours.tokens_to_residual_directions(tokens), tl_model.tokens_to_residual_directions(tokens))


def test_tokens_to_residual_directions_refuses_strings(caches):
    # Our models have no tokenizer: the method's own message says so, or (under pytest's shape
    # checks) its `int | Int[Tensor, ...]` annotation refuses the string first.
    with pytest.raises(TypeError, match="tokenizer|tokens"):
        caches[1].tokens_to_residual_directions("1")


def test_accumulated_bias_at_every_layer(caches):
    tl_model, ours, _, _ = caches
    n = ours.cfg.n_layers
    with torch.no_grad():
        for layer in range(n + 1):
            for mlp_input in (False, True) if layer < n else (False,):
                for mlp_biases in (True, False):
                    _same(
                        ours.accumulated_bias(layer, mlp_input, mlp_biases),
                        tl_model.accumulated_bias(layer, mlp_input, mlp_biases),
                    )


def test_logit_attrs_of_the_label_contrast(caches):
    _, _, tl_cache, cache = caches
    labels = torch.tensor([0, 2, 1, 1, 0])
    with torch.no_grad():
        for method in ("decompose_resid", "stack_head_results"):
            ours, theirs = (c.__getattribute__(method)(pos_slice=-1) for c in (cache, tl_cache))
            _same(
                cache.logit_attrs(ours, labels, (labels + 1) % D_OUT, pos_slice=-1),
                tl_cache.logit_attrs(theirs, labels, (labels + 1) % D_OUT, pos_slice=-1),
            )
        full = cache.get_full_resid_decomposition(pos_slice=-1)
        _same(
            cache.logit_attrs(full, 1, pos_slice=-1),
            tl_cache.logit_attrs(tl_cache.get_full_resid_decomposition(pos_slice=-1), 1, pos_slice=-1),
        )
