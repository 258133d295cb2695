"""Weight geometry: effective rank of weight matrices, and parameter drift.

*Effective rank* (Roy & Vetterli 2007) of a matrix with singular values ``s_i``:
``exp(H(p))`` with ``p_i = s_i / sum_j s_j`` and ``H(p) = -sum_i p_i ln p_i`` (``0 ln 0 = 0``).
It lies in ``[1, min(m, n)]``: 1 for a rank-1 matrix, ``n`` for a multiple of the ``n x n``
identity. Reported for the attention and MLP matrices, it tells apart models that fit the
same data differently (e.g. a WLMD equilibrium model from an AdamW one).

*Parameter drift*: the cosine between two parameter vectors (a model before and after noise
injection), in total and per tensor. When the vocabulary was extended between the two
(`models.vocab`), each tensor is compared on its overlapping slice (the leading
``min(size_a, size_b)`` entries of every dimension), i.e. on the original tensors only.

Everything here reads weights by name and TransformerLens attribute (`W_Q`, `QK`, ...), so it
works on any hooked transformer without importing `models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from interp.dissect.hooks import has_mlps


def effective_rank_of_singular_values(s: Tensor) -> float:
    """Roy-Vetterli effective rank from singular values (any shape; flattened).

    Returns 0.0 for an all-zero spectrum (no direction at all), so callers never see NaN.
    """
    s = s.detach().double().flatten().abs()
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def effective_rank(matrix: Tensor) -> float:
    """Roy-Vetterli effective rank of a 2-D matrix (see the module docstring)."""
    if matrix.ndim != 2:
        raise ValueError(f"effective_rank needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    return effective_rank_of_singular_values(torch.linalg.svdvals(matrix.detach().double()))


@dataclass(frozen=True)
class RankRow:
    """One measured matrix: which layer and head (-1: all heads / not per head), its effective
    rank, and its largest possible rank ``min(m, n)``.
    """

    matrix: str
    layer: int
    head: int
    effective_rank: float
    max_rank: int


@torch.no_grad()
def transformer_ranks(model: nn.Module) -> list[RankRow]:
    """Effective ranks of a TransformerLens-style transformer's matrices.

    Per layer: `W_Q`, `W_K`, `W_V`, `W_O` per head and concatenated over heads
    (``[d_model, n_heads * d_head]``, `W_O` as ``[n_heads * d_head, d_model]``), `W_QK` and
    `W_OV` per head (singular values of `model.QK` / `model.OV`, FactoredMatrix), `W_in`,
    `W_out`; then the embedding `W_E` and unembedding `W_U` (layer -1).
    """
    rows: list[RankRow] = []
    mlps = ("W_in", "W_out") if has_mlps(model) else ()  # none in an attention-only TransformerLens model
    W = {name: getattr(model, name).detach() for name in ("W_Q", "W_K", "W_V", "W_O", *mlps)}
    QK_S, OV_S = model.QK.S.detach(), model.OV.S.detach()
    n_layers, n_heads = W["W_Q"].shape[:2]
    d_model = W["W_Q"].shape[2]
    for layer in range(n_layers):
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            for head in range(n_heads):
                m = W[name][layer, head]
                rows.append(RankRow(name, layer, head, effective_rank(m), min(m.shape)))
            stacked = W[name][layer]
            cat = (
                stacked.reshape(-1, d_model)
                if name == "W_O"
                else stacked.permute(1, 0, 2).reshape(d_model, -1)
            )
            rows.append(RankRow(name, layer, -1, effective_rank(cat), min(cat.shape)))
        for name, S in (("W_QK", QK_S), ("W_OV", OV_S)):
            for head in range(n_heads):
                rows.append(
                    RankRow(name, layer, head, effective_rank_of_singular_values(S[layer, head]), S.shape[-1])
                )
        for name in mlps:
            m = W[name][layer]
            rows.append(RankRow(name, layer, -1, effective_rank(m), min(m.shape)))
    for name in ("W_E", "W_U"):
        m = getattr(model, name).detach()
        rows.append(RankRow(name, -1, -1, effective_rank(m), min(m.shape)))
    return rows


@dataclass(frozen=True)
class Drift:
    """Cosine between two parameter sets.

    Attributes:
        total: Cosine of the concatenated (overlapping) tensors.
        per_tensor: ``{name: cosine}`` per tensor present in both (None if either slice is
            all zeros, e.g. biases at initialisation: JSON has no NaN).
        norm_a: L2 norm of the first set's overlapping slices; `norm_b` likewise.
        distance: ``||a - b||`` over the overlapping slices.
        sliced: Names of tensors whose shapes differed (compared on the overlap).
    """

    total: float | None
    per_tensor: dict[str, float | None]
    norm_a: float
    norm_b: float
    distance: float
    sliced: list[str]


def overlap(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """The leading ``min(size_a, size_b)`` entries of every dimension of both tensors.

    Raises:
        ValueError: If the tensors have different numbers of dimensions.
    """
    if a.ndim != b.ndim:
        raise ValueError(f"cannot overlap tensors of shapes {tuple(a.shape)} and {tuple(b.shape)}")
    index = tuple(slice(0, min(x, y)) for x, y in zip(a.shape, b.shape))
    return a[index], b[index]


@torch.no_grad()
def parameter_cosine(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Drift:
    """Cosine between two state dicts over the floating tensors they share (by name).

    Raises:
        ValueError: If they share no floating tensor.
    """
    names = [k for k in a if k in b and a[k].is_floating_point() and b[k].is_floating_point()]
    if not names:
        raise ValueError("the two parameter sets share no floating-point tensor")
    dot = na = nb = dist = 0.0
    per, sliced = {}, []
    for name in names:
        x, y = overlap(a[name].detach().double().cpu(), b[name].detach().double().cpu())
        if x.shape != a[name].shape or y.shape != b[name].shape:
            sliced.append(name)
        d, sx, sy = float((x * y).sum()), float(x.square().sum()), float(y.square().sum())
        per[name] = d / (sx * sy) ** 0.5 if sx > 0 and sy > 0 else None
        dot, na, nb = dot + d, na + sx, nb + sy
        dist += float((x - y).square().sum())
    total = dot / (na * nb) ** 0.5 if na > 0 and nb > 0 else None
    return Drift(total, per, na**0.5, nb**0.5, dist**0.5, sliced)
