"""Oracle: the quadratic MLP's embedding-lookup forward against the study's one-hot matmuls."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models import QuadraticMLP, QuadraticMLPConfig


def test_lookup_forward_equals_one_hot_matmul():
    p = 11
    model = QuadraticMLP(QuadraticMLPConfig(d_vocab=p, d_vocab_out=p, d_hidden=20), seed=1)
    m, n = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
    tokens = torch.stack([m.flatten(), n.flatten(), torch.full((p * p,), p)], dim=1)
    # h = (U onehot(m) + V onehot(n))^2, logits = W h, with U, V, W as column-vector maps.
    U, V, W = model.W_E_left.T, model.W_E_right.T, model.W_U.T
    onehot_m = F.one_hot(tokens[:, 0], p).float().T  # [p, batch]
    onehot_n = F.one_hot(tokens[:, 1], p).float().T
    expected = (W @ (U @ onehot_m + V @ onehot_n) ** 2).T
    logits, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache["hook_post"], cache["hook_pre"] ** 2)
    assert set(cache.keys()) == {"hook_pre", "hook_post", "hook_logits"}
