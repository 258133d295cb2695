"""Models shared by the oracle tests."""

from __future__ import annotations

import torch

import models
from interp.splits import Task
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
