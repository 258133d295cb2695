"""`QuadraticMLP.fast_readout` (hand-written backward) equals the hooked forward and autograd.

fp32: logits and every gradient of study C's MSE loss to float rounding; bf16 autocast: close,
with fp32 logits and gradients; and per-seed gradients under `torch.func.vmap` (vectorised seeds).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from models import QuadraticMLPConfig, build_model

P, WIDTH, BATCH = 11, 16, 60


def _model(seed: int = 0):
    return build_model(QuadraticMLPConfig(d_vocab=P + 1, d_vocab_out=P, d_hidden=WIDTH), seed=seed)


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    mn = torch.randint(
        0, P, (BATCH, 2), generator=gen
    )  # repeated operands: the lookups' gradients accumulate
    tokens = torch.cat([mn, torch.full((BATCH, 1), P)], 1)
    return tokens, F.one_hot((mn[:, 0] + mn[:, 1]) % P, P).float()


def _grads(model, logits: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    (logits - target).square().mean().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_fast_readout_equals_hooked_forward_and_autograd():
    model, (tokens, target) = _model(), _data()
    hooked = model(tokens)
    fast = model.fast_readout(tokens)
    torch.testing.assert_close(fast, hooked, atol=1e-6, rtol=1e-6)
    reference = _grads(model, model(tokens), target)  # autograd through the hooked forward
    for name, g in _grads(model, model.fast_readout(tokens), target).items():
        torch.testing.assert_close(g, reference[name], atol=1e-7, rtol=1e-5, msg=name)


def test_bf16_products_keep_fp32_logits_and_gradients():
    model, (tokens, target) = _model(), _data()
    reference = _grads(model, model(tokens), target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model.fast_readout(tokens)
    assert low.dtype == torch.float32
    assert (low - model(tokens)).abs().max() <= 2e-2 * model(tokens).abs().max()
    for name, g in _grads(model, low, target).items():
        assert g.dtype == torch.float32
        assert (g - reference[name]).abs().max() <= 2e-2 * reference[name].abs().max(), name


def test_vmapped_gradients_equal_each_seeds_own():
    models, (tokens, target) = [_model(s) for s in range(3)], _data()
    names = [n for n, _ in models[0].named_parameters()]
    stacked = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]) for n in names}

    def fast_loss(params):
        module = _Fast(models[0])
        logits = functional_call(module, {f"model.{n}": p for n, p in params.items()}, (tokens,))
        return (logits - target).square().mean()

    batched = vmap(grad(fast_loss))(stacked)
    for i, model in enumerate(models):
        for name, g in _grads(model, model.fast_readout(tokens), target).items():
            torch.testing.assert_close(batched[name][i], g, atol=1e-7, rtol=1e-5, msg=name)


class _Fast(torch.nn.Module):
    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.fast_readout(tokens)


def test_rejects_bad_token_shape():
    with pytest.raises(ValueError, match="batch, pos"):
        _model().fast_readout(torch.zeros(4, 1, dtype=torch.long))
