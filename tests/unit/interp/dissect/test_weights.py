"""Effective rank on matrices with known spectra, and parameter cosine on known vectors."""

from __future__ import annotations

import math

import pytest
import torch

from interp.dissect.weights import (
    effective_rank,
    effective_rank_of_singular_values,
    parameter_cosine,
    transformer_ranks,
)
from models import build_model, preset_config
from tasks import ModAddTask


@pytest.mark.parametrize("n", [1, 3, 8])
def test_identity_has_full_effective_rank(n):
    assert effective_rank(torch.eye(n)) == pytest.approx(n)
    assert effective_rank(5.0 * torch.eye(n)) == pytest.approx(n)


def test_rank_one_matrix_has_effective_rank_one():
    u, v = torch.randn(7, 1), torch.randn(1, 5)
    assert effective_rank(u @ v) == pytest.approx(1.0, abs=1e-6)


def test_diagonal_matches_the_formula():
    s = torch.tensor([4.0, 2.0, 1.0, 1.0])
    p = s / s.sum()
    expected = math.exp(-float((p * p.log()).sum()))
    q, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))
    assert effective_rank(torch.diag(s)) == pytest.approx(expected)
    assert effective_rank(q @ torch.diag(s).double() @ q.T) == pytest.approx(expected)  # rotation-invariant
    assert effective_rank_of_singular_values(torch.tensor([0.0, 0.0])) == 0.0


def test_effective_rank_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D"):
        effective_rank(torch.ones(3))


def test_cosine_on_known_vectors():
    a = {"w": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0, 0.0])}
    b = {"w": torch.tensor([1.0, 1.0]), "b": torch.tensor([0.0, 0.0])}
    drift = parameter_cosine(a, b)
    assert drift.total == pytest.approx(1 / math.sqrt(2))
    assert drift.per_tensor["w"] == pytest.approx(1 / math.sqrt(2))
    assert drift.per_tensor["b"] is None  # zero tensors: undefined, not NaN
    assert drift.distance == pytest.approx(1.0)
    assert parameter_cosine(a, {"w": -a["w"]}).total == pytest.approx(-1.0)


def test_cosine_uses_the_overlap_of_extended_tensors():
    a = {"W_E": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
    b = {"W_E": torch.tensor([[1.0, 2.0], [3.0, 4.0], [100.0, -7.0]])}  # one new row
    drift = parameter_cosine(a, b)
    assert drift.total == pytest.approx(1.0) and drift.sliced == ["W_E"]


def test_transformer_ranks_match_explicit_products():
    model = build_model(preset_config("modadd-1l", ModAddTask(p=7), d_model=16, d_head=4, d_mlp=32), seed=1)
    rows = {(r.matrix, r.layer, r.head): r for r in transformer_ranks(model)}
    W_Q, W_K, W_V, W_O = (getattr(model, n)[0].detach() for n in ("W_Q", "W_K", "W_V", "W_O"))
    for h in range(4):
        assert rows["W_QK", 0, h].effective_rank == pytest.approx(effective_rank(W_Q[h] @ W_K[h].T), rel=1e-4)
        assert rows["W_OV", 0, h].effective_rank == pytest.approx(effective_rank(W_V[h] @ W_O[h]), rel=1e-4)
        assert rows["W_Q", 0, h].max_rank == 4
    assert rows["W_Q", 0, -1].effective_rank == pytest.approx(effective_rank(torch.cat(list(W_Q), dim=1)))
    assert rows["W_O", 0, -1].effective_rank == pytest.approx(effective_rank(torch.cat(list(W_O), dim=0)))
    assert rows["W_in", 0, -1].max_rank == 16 and ("W_E", -1, -1) in rows
