"""`fast_readout` (the training forward pass) equals the hooked forward pass at the readout.

Logits to 1e-5 and gradients of a cross-entropy loss to ~1e-5 in fp32, on every kind of config
`TransformerConfig` allows; close to fp32 under bfloat16 autocast.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from models.config import TransformerConfig
from models.fast_forward import compiled_fast_readout, fast_readout
from models.transformer import Transformer
from tests.builders import perturbed

D_VOCAB, N_CTX, D_OUT = 11, 6, 3

# (n_layers, n_heads, normalization_type, attention_dir, act_fn, positional_embedding_type,
#  use_attn_result)
CONFIGS = [
    (1, 1, "LN", "causal", "relu", "standard", False),
    (1, 2, "LN", "bidirectional", "gelu", "none", True),
    (1, 4, None, "causal", "gelu", "standard", False),
    (1, 3, None, "bidirectional", "relu", "none", False),
    (2, 1, "LN", "causal", "relu", "standard", True),
    (2, 2, "LN", "causal", "relu", "standard", False),
    (2, 2, None, "bidirectional", "gelu", "standard", False),
    (2, 4, "LN", "bidirectional", "relu", "none", False),
    (2, 3, None, "causal", "gelu", "none", True),
    (3, 2, "LN", "causal", "gelu", "standard", False),
    (3, 1, None, "bidirectional", "relu", "standard", True),
    (4, 4, "LN", "causal", "relu", "none", False),
]


def _model(n_layers, n_heads, norm, attn_dir, act, pos, result, d_model=24) -> Transformer:
    cfg = TransformerConfig(
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        d_mlp=32,
        n_ctx=N_CTX,
        d_vocab=D_VOCAB,
        d_vocab_out=D_OUT,
        normalization_type=norm,
        attention_dir=attn_dir,
        act_fn=act,
        positional_embedding_type=pos,
        use_attn_result=result,
    )
    return perturbed(Transformer(cfg, seed=3))


def _tokens(batch: int, n_pos: int = N_CTX, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, D_VOCAB, (batch, n_pos), generator=torch.Generator().manual_seed(seed))


def _grads(model: Transformer, logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(logits, labels).backward()
    return {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_fast_readout_matches_hooked_forward_and_gradients(config):
    model = _model(*config)
    tokens = _tokens(48)
    labels = torch.randint(0, D_OUT, (48,), generator=torch.Generator().manual_seed(1))

    hooked = model(tokens)[:, -1]
    fast = fast_readout(model, tokens)
    assert fast.shape == hooked.shape and fast.dtype == torch.float32
    torch.testing.assert_close(fast, hooked, atol=1e-5, rtol=0)

    g_hooked = _grads(model, model(tokens)[:, -1], labels)
    g_fast = _grads(model, fast_readout(model, tokens), labels)
    assert g_fast.keys() == g_hooked.keys()
    for name in g_hooked:
        torch.testing.assert_close(g_fast[name], g_hooked[name], atol=1e-5, rtol=1e-4, msg=name)


def test_every_parameter_gets_a_gradient():
    model = _model(2, 2, "LN", "causal", "relu", "standard", False)
    fast_readout(model, _tokens(8)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("n_layers", [1, 2])
def test_batch_one_and_short_sequences(n_layers):
    model = _model(n_layers, 2, "LN", "causal", "relu", "standard", False)
    for n_pos in (1, 3, N_CTX):
        tokens = _tokens(1, n_pos, seed=n_pos)
        torch.testing.assert_close(fast_readout(model, tokens), model(tokens)[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_bf16_autocast_close_to_fp32(n_layers):
    model = _model(n_layers, 2, "LN", "causal", "relu", "standard", False, d_model=32)
    tokens = _tokens(64)
    reference = model(tokens)[:, -1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = fast_readout(model, tokens)
    assert low.dtype == torch.float32
    scale = reference.abs().max()
    assert (low - reference).abs().max() <= 5e-2 * scale
    low.sum().backward()  # differentiable under autocast, gradients in the parameters' dtype
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def test_hooks_are_not_run():
    model = _model(1, 1, "LN", "causal", "relu", "standard", False)
    seen = []
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda t, hook: seen.append(hook.name))]):
        fast_readout(model, _tokens(4))
    assert seen == []


def test_method_on_model_delegates():
    model = _model(2, 1, "LN", "causal", "relu", "standard", False)
    tokens = _tokens(5)
    torch.testing.assert_close(model.fast_readout(tokens), fast_readout(model, tokens), atol=0, rtol=0)


def test_rejects_bad_token_shape():
    model = _model(1, 1, "LN", "causal", "relu", "standard", False)
    # The shape annotation's check (pytest runs the jaxtyping hook) or the function's own.
    with pytest.raises((ValueError, TypeError), match=r"batch, pos|batch pos"):
        fast_readout(model, torch.zeros(6, dtype=torch.long))


# torch.compile's first call (~50 s on 2 loaded cores): `make test-slow`, which CI also runs.
@pytest.mark.slow
def test_compiled_fast_readout_matches_hooked_forward():
    # torch.compile costs ~10 s here; one 2-layer model covers every branch of the fast path.
    model = _model(2, 2, "LN", "causal", "relu", "standard", False)
    tokens = _tokens(16)
    compiled = compiled_fast_readout(model)
    torch.testing.assert_close(compiled(tokens), model(tokens)[:, -1], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="batch, pos"):
        compiled(torch.zeros(6, dtype=torch.long))


# A 2-layer causal model computes the leading positions as tables over every token prefix
# while 2 * V**n <= batch (`prefix_len`): with V = 5 a batch of 8 has no prefix table, 16 one
# position, 64 two positions. A one-off minibatch (`minibatch=True`, no CSR plans) asks for
# 8 * V**n: none at 8 and 16, one position at 64, two at 256. Each must equal the hooked
# forward, logits and gradients.
@pytest.mark.parametrize("batch", [8, 16, 64, 256])
@pytest.mark.parametrize("pos_type", ["standard", "none"])
@pytest.mark.parametrize("minibatch", [False, True], ids=["recurring", "minibatch"])
def test_prefix_tables_match_hooked_forward_and_gradients(batch, pos_type, minibatch):
    cfg = TransformerConfig(
        n_layers=2,
        n_heads=2,
        d_model=24,
        d_mlp=32,
        n_ctx=N_CTX,
        d_vocab=5,
        d_vocab_out=D_OUT,
        normalization_type="LN",
        attention_dir="causal",
        act_fn="relu",
        positional_embedding_type=pos_type,
    )
    model = Transformer(cfg, seed=5)
    tokens = torch.randint(0, 5, (batch, N_CTX), generator=torch.Generator().manual_seed(batch))
    labels = torch.randint(0, D_OUT, (batch,), generator=torch.Generator().manual_seed(1))
    fast = fast_readout(model, tokens, minibatch=minibatch)
    torch.testing.assert_close(fast, model(tokens)[:, -1], atol=1e-5, rtol=0)
    g_hooked = _grads(model, model(tokens)[:, -1], labels)
    g_fast = _grads(model, fast_readout(model, tokens, minibatch=minibatch), labels)
    for name in g_hooked:
        torch.testing.assert_close(g_fast[name], g_hooked[name], atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_vmapped_gradients_equal_each_models_own(n_layers):
    # Vectorised seeds vmap the forward (its autograd.Functions have generated vmap rules, and
    # torch loops over seeds for embedding_bag); each seed must get its own gradients.
    models = [_model(n_layers, 2, "LN", "causal", "relu", "standard", False) for _ in range(3)]
    for i, m in enumerate(models[1:], 1):
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.05)
    tokens, labels = _tokens(32), torch.randint(0, D_OUT, (32,), generator=torch.Generator().manual_seed(2))
    names = [n for n, _ in models[0].named_parameters()]
    stacked = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]) for n in names}
    template = _FastReadout(models[0])

    def loss(params):
        logits = functional_call(template, {f"model.{n}": p for n, p in params.items()}, (tokens,))
        return F.cross_entropy(logits, labels)

    batched = vmap(grad(loss))(stacked)
    for i, m in enumerate(models):
        own = _grads(m, fast_readout(m, tokens), labels)
        for name in own:
            torch.testing.assert_close(batched[name][i], own[name], atol=1e-5, rtol=1e-4, msg=name)


class _FastReadout(torch.nn.Module):
    """`fast_readout` of a model as a module that `functional_call` can fill with other weights."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return fast_readout(self.model, tokens)
