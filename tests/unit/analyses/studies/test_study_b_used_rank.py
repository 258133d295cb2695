"""Effective rank where the function reads: a constructed matrix whose used rank differs from
its raw rank, and a one-layer model's W_Q, read along one direction only.
"""

from __future__ import annotations

import pytest
import torch

from analyses.studies.study_b.used_rank import model_used_ranks, used_rank
from interp.dissect.weights import effective_rank


def test_a_matrix_read_on_a_two_dimensional_span_has_used_rank_two_whatever_its_raw_rank():
    torch.manual_seed(0)
    d = 8
    # Inputs span the first two coordinates only; the matrix is the identity scaled per row:
    # on the span it is diag(1, 1) (rank 2, effective rank 2); elsewhere six more directions.
    inputs = torch.randn(50, d) * torch.tensor([1.0, 1.0] + [0.0] * (d - 2))
    matrix = torch.eye(d)
    found = used_rank(matrix, inputs)
    assert found.span == 2
    assert found.used == pytest.approx(2.0) and found.raw == pytest.approx(float(d))
    assert found.outside_norm == pytest.approx(6**0.5) and found.norm == pytest.approx(d**0.5)
    # A random matrix: full raw rank, and still exactly the span's directions are used.
    random = torch.randn(d, 5)
    found = used_rank(random, inputs)
    assert found.raw > 3 and 1 <= found.used <= 2 + 1e-9
    inside = random.clone()
    inside[2:] = 0  # what the inputs read of it
    assert found.used == pytest.approx(effective_rank(inside))
    assert found.outside_norm == pytest.approx(float(torch.linalg.norm(random[2:])))


def test_inputs_along_one_direction_use_rank_one_and_shapes_are_checked():
    direction = torch.randn(6)
    inputs = torch.stack([c * direction for c in (1.0, -2.0, 0.5)])
    found = used_rank(torch.randn(6, 4), inputs)
    assert (found.span, found.used) == (1, pytest.approx(1.0))
    with pytest.raises(ValueError, match=r"\[d_in, d_out\] matrix"):
        used_rank(torch.randn(5, 4), inputs)


def test_a_one_layer_models_w_q_is_read_along_one_direction():
    from models import build_model, preset_config
    from tasks import ModAddTask

    task = ModAddTask(p=7)
    model = build_model(preset_config("modadd-1l", task, d_model=16, n_heads=2, d_head=8, d_mlp=32), seed=0)
    tokens = task.splits(0)["train"].tokens
    frame = model_used_ranks(model, tokens).set_index(["matrix", "head"])
    # The residual at '=' is the same vector for every input: one direction per head and per layer.
    assert frame.loc["W_Q"].index.tolist() == [0, 1, -1] and (frame.loc["W_Q", "span"] == 1).all()
    assert frame.loc["W_Q", "used"].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert (frame.loc["W_Q", "raw"] > 2).all() and (frame.loc["W_Q", "outside_norm"] > 0).all()
    assert (frame["used"] <= frame["raw"] + 1e-9).all()
