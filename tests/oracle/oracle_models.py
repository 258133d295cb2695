"""Models shared by the oracle tests."""

from __future__ import annotations

import torch
from transformer_lens import HookedTransformer

import models
from interp.splits import Task
from models.convert import from_transformer_lens, to_transformer_lens_config
from tests.builders import tiny_config


def random_transformer(task: Task, seed: int = 0, **overrides) -> models.Transformer:
    """A small `Transformer` for `task` with random non-zero biases and LayerNorm weights and
    larger logits (so every term of the computation under test matters), in eval mode.

    Args:
        task: Sets `n_ctx`, `d_vocab` and `d_vocab_out`.
        seed: Seed of the init; the perturbation uses `seed + 1`.
        **overrides: `TransformerConfig` fields (default 2 layers, 2 heads, d_model 16, d_mlp 32).
    """
    model = models.Transformer(tiny_config(task, **overrides), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.split(".")[-1].startswith("W_"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
        model.unembed.W_U.mul_(4.0)
    return model.eval()


def transformer_lens_pair(overrides: dict, seed: int = 0) -> tuple[HookedTransformer, models.Transformer]:
    """A TransformerLens 3.9 `HookedTransformer` with random non-zero biases and LayerNorm weights
    (so they are tested too), and the same weights as our `Transformer` (`from_transformer_lens`).

    Args:
        overrides: `TransformerConfig` fields beyond d_model 32, d_mlp 64, n_ctx 6, 17 tokens, 3 classes.
        seed: Seed of the init and the perturbation.
    """
    cfg = models.TransformerConfig(d_model=32, d_mlp=64, n_ctx=6, d_vocab=17, d_vocab_out=3, **overrides)
    torch.manual_seed(seed)
    tl_model = HookedTransformer(to_transformer_lens_config(cfg))
    with torch.no_grad():
        for name, p in tl_model.named_parameters():
            if not name.split(".")[-1].startswith("W_"):
                p.add_(0.1 * torch.randn_like(p))
    return tl_model, from_transformer_lens(tl_model)


def pair_tokens(n: int = 8, seed: int = 1) -> torch.Tensor:
    """`[n, 6]` tokens in 0..16 for `transformer_lens_pair`'s models."""
    return torch.randint(0, 17, (n, 6), generator=torch.Generator().manual_seed(seed))
