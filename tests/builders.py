"""Small models the tests build again and again, sized for a task (one place, one default)."""

from __future__ import annotations

from typing import Any

import models
from interp.splits import Task


def tiny_config(task: Task, **fields: Any) -> models.TransformerConfig:
    """A `TransformerConfig` sized for `task`: 2 layers, 2 heads, d_model 16, d_mlp 32 unless `fields` say otherwise."""
    defaults = {"n_layers": 2, "n_heads": 2, "d_model": 16, "d_mlp": 32}
    return models.TransformerConfig(
        **{**defaults, **fields}, n_ctx=task.n_ctx, d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out
    )


def tiny_transformer(task: Task, seed: int = 0, **fields: Any) -> models.Transformer:
    """A freshly initialised `Transformer` of `tiny_config(task, **fields)`, in eval mode."""
    return models.Transformer(tiny_config(task, **fields), seed=seed).eval()


STUDY_B_TOY: dict[str, Any] = {
    "p": 11,
    "train_frac": 0.6,
    "epochs": 30,
    "lr": 1e-2,
    "model_overrides": {"d_model": 16, "d_mlp": 32, "d_head": 8},
}
"""Study B's settings at toy scale (`study_b_settings.settings_with`): p = 11, a small model, 30
epochs of AdamW; the pilots' and the wall diagnostic's tests walk from it."""


# Analyses whose defaults cost minutes, at a size the suite can afford (the same code paths):
# circuit's defaults took ~4 minutes, and llc's 4 chains x 300 steps (6 grid cells for
# llc-calibrate) 12 to 30 minutes a test on CI's loaded cores. Short chains still exercise every
# path (the chains' loop, R-hat over 2 chains, the grid).
ANALYSIS_SIZES: dict[str, dict[str, Any]] = {
    "circuit": {"max_examples": 12, "steps": 3},
    "llc": {"chains": 2, "draws": 6, "burn_in": 4},
    "llc-calibrate": {"chains": 2, "draws": 6, "burn_in": 4, "step_sizes": "1e-4,1e-3", "n_betas": "1x"},
}


def perturbed(model: Any, seed: int = 4) -> Any:
    """`model` with every weight moved by N(0, 0.1^2) noise, in place: non-trivial biases and
    LayerNorm weights, so a test of a forward's algebra exercises every term. Returns `model`.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def sized_params(name: str) -> Any:
    """Analysis `name`'s parameters at the suite's size (`ANALYSIS_SIZES`; defaults otherwise)."""
    from analyses import get_analysis

    return get_analysis(name).params(**ANALYSIS_SIZES.get(name, {}))


def size_args(name: str) -> list[str]:
    """The same sizes as CLI options (`--burn-in 4`)."""
    sizes = ANALYSIS_SIZES.get(name, {})
    return [arg for key, value in sizes.items() for arg in (f"--{key.replace('_', '-')}", str(value))]
