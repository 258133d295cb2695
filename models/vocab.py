"""Extend a transformer's vocabulary with new input tokens (and optionally new classes).

Study B's noise injection adds `k` new number tokens (ids ``d_vocab..d_vocab+k-1``) and, with
``new_classes``, new output classes. The extended model computes exactly the same logits as
the original on every original input, for the original classes (the new rows of `W_E` are
never read by original tokens; new `W_U` columns only add new logits).

Initialisation of the new weights (a choice of ours, study B does not say):

* new `W_E` rows: ``Normal(0, std)`` with `std` the standard deviation of all entries of the
  existing `W_E`, so a new token's embedding is as large as an old one's;
* new `W_U` columns: ``Normal(0, std of the existing W_U entries)``; new `b_U` entries: the
  mean of the existing `b_U`.

Both draw from a local generator seeded by `seed`; the global RNG is untouched.
"""

from __future__ import annotations

import dataclasses

import torch

from models.transformer import Transformer


@torch.no_grad()
def extend_vocab(model: Transformer, n_tokens: int, n_classes: int = 0, *, seed: int = 0) -> Transformer:
    """Return a copy of `model` with `n_tokens` new input tokens and `n_classes` new classes.

    Args:
        model: The trained transformer (left unchanged).
        n_tokens: New input token ids, appended after the existing ones (>= 0).
        n_classes: New output classes, appended after the existing ones (>= 0).
        seed: Seed of the new rows' and columns' initialisation.

    Returns:
        A new `Transformer` with ``d_vocab + n_tokens`` tokens and ``d_vocab_out + n_classes``
        classes, in the mode (train / eval) of `model`.

    Raises:
        ValueError: If a count is negative.
    """
    if n_tokens < 0 or n_classes < 0:
        raise ValueError(f"n_tokens={n_tokens} and n_classes={n_classes} must be >= 0")
    cfg = dataclasses.replace(
        model.cfg, d_vocab=model.cfg.d_vocab + n_tokens, d_vocab_out=model.cfg.d_vocab_out + n_classes
    )
    new = Transformer(cfg)
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    W_E, W_U, b_U = state["embed.W_E"], state["unembed.W_U"], state["unembed.b_U"]
    rows = torch.randn(n_tokens, W_E.shape[1], generator=gen, dtype=W_E.dtype) * W_E.std()
    cols = torch.randn(W_U.shape[0], n_classes, generator=gen, dtype=W_U.dtype) * W_U.std()
    state["embed.W_E"] = torch.cat([W_E, rows])
    state["unembed.W_U"] = torch.cat([W_U, cols], dim=1)
    state["unembed.b_U"] = torch.cat([b_U, b_U.mean().expand(n_classes)])
    new.load_state_dict(state, strict=True)
    return new.train(model.training)
