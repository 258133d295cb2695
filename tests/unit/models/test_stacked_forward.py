"""`stacked_readout` (several chains' weights in one pass) equals each chain's own forward pass.

For every kind of 1- and 2-layer config `TransformerConfig` allows: each chain's logits equal the
hooked readout of the model holding that chain's weights to 1e-5 in fp32, and the gradient of
the sum of the chains' losses is each chain's own gradient (to float rounding), so the chains
never mix. A weight not stacked is the model's own, shared by every chain.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from models.config import TransformerConfig
from models.stacked_forward import stacked_readout, supports
from models.transformer import Transformer
from tests.builders import perturbed

D_VOCAB, N_CTX, D_OUT, CHAINS, BATCH = 11, 6, 3, 3, 7

# (n_layers, n_heads, normalization_type, attention_dir, act_fn, positional_embedding_type)
CONFIGS = [
    (1, 1, "LN", "causal", "relu", "standard"),
    (1, 2, "LN", "bidirectional", "gelu", "none"),
    (1, 3, None, "causal", "gelu", "standard"),
    (2, 1, "LN", "causal", "relu", "standard"),
    (2, 2, "LN", "causal", "gelu", "none"),
    (2, 2, None, "bidirectional", "relu", "standard"),
    (2, 3, None, "causal", "relu", "none"),
    (2, 4, "LN", "bidirectional", "gelu", "standard"),
]


def _model(n_layers, n_heads, norm, attn_dir, act, pos) -> Transformer:
    cfg = TransformerConfig(
        n_layers=n_layers, n_heads=n_heads, d_model=24, d_mlp=32, n_ctx=N_CTX, d_vocab=D_VOCAB,
        d_vocab_out=D_OUT, normalization_type=norm, attention_dir=attn_dir, act_fn=act,
        positional_embedding_type=pos,
    )  # fmt: skip
    return perturbed(Transformer(cfg, seed=3))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_each_chain_gets_its_own_logits_and_gradient(config, n_pos=N_CTX - 1):
    model = _model(*config)
    gen = torch.Generator().manual_seed(5)
    names = [name for name, _ in model.named_parameters()][::2]  # the others shared
    params = {
        name: (value.detach() + 0.05 * torch.randn(CHAINS, *value.shape, generator=gen)).requires_grad_()
        for name, value in model.named_parameters()
        if name in names
    }
    tokens = torch.randint(D_VOCAB, (CHAINS, BATCH, n_pos), generator=gen)
    labels = torch.randint(D_OUT, (CHAINS, BATCH), generator=gen)
    logits = stacked_readout(model, params, tokens)
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none").mean(1)
    grads = torch.autograd.grad(losses.sum(), list(params.values()), allow_unused=True)
    for c in range(CHAINS):
        own = copy.deepcopy(model)
        weights = dict(own.named_parameters())
        with torch.no_grad():
            for name, value in params.items():
                weights[name].copy_(value[c])
        expected = own.readout(tokens[c])
        torch.testing.assert_close(logits[c], expected, rtol=1e-5, atol=1e-5)
        loss = F.cross_entropy(expected, labels[c])
        torch.testing.assert_close(losses[c], loss, rtol=1e-5, atol=1e-6)
        want = torch.autograd.grad(loss, [weights[name] for name in params])
        scale = max(float(g.abs().max()) for g in want)
        for name, got, wanted in zip(params, grads, want, strict=True):
            # A key bias the softmax cancels (the last layer's; layer 0's at a 1-layer model's
            # single query) has gradient 0 in exact arithmetic: None here, rounding there.
            got = torch.zeros_like(wanted) if got is None else got[c]
            torch.testing.assert_close(got, wanted, rtol=1e-4, atol=1e-5 * scale, msg=name)


def test_only_our_one_and_two_layer_transformers_are_supported():
    assert supports(_model(*CONFIGS[0])) and supports(_model(*CONFIGS[3]))
    assert not supports(_model(3, 1, "LN", "causal", "relu", "standard"))
    assert not supports(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="1- or 2-layer transformer"):
        stacked_readout(
            _model(3, 1, "LN", "causal", "relu", "standard"), {}, torch.zeros(2, 5, 4, dtype=torch.long)
        )
