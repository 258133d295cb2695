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
