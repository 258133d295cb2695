"""Effective rank where the function reads: a weight matrix restricted to the inputs it sees.

A matrix's raw effective rank (`interp.dissect.weights.effective_rank`) counts every direction
of its input space, including those no input ever has a component along. In ``modadd-1l`` (one
layer, no LayerNorm) the residual at the ``=`` position, where the answer is read, is
``W_E[=] + W_pos[2]`` for every input, so ``W_Q`` is read along that one direction per head:
its raw rank measures directions the function never reads (a WLMD walk diffuses in them
freely, the loss being blind to them), while its used rank is at most 1. `used_rank`
restricts a matrix to the span of the inputs it reads and reports the norm left outside it.

`model_used_ranks` applies it to a ``modadd-1l`` model on its task's inputs: ``W_Q`` on the
residual at ``=``; ``W_K`` and ``W_V`` on the token-plus-position embeddings of every position;
``W_in`` on the residuals at ``=`` after attention; ``W_out`` on the MLP activations there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from interp.dissect.weights import effective_rank

SPAN_RTOL = 1e-6  # singular values of the inputs below this fraction of the largest span no direction


@dataclass(frozen=True)
class UsedRank:
    """A matrix's effective rank on the span of its inputs, beside its raw one.

    Attributes:
        used: Roy-Vetterli effective rank of the matrix projected onto its inputs' span.
        raw: Its raw effective rank (every direction of the input space).
        span: The dimension of the inputs' span.
        outside_norm: Frobenius norm of the part of the matrix on directions no input has.
        norm: Frobenius norm of the whole matrix.
    """

    used: float
    raw: float
    span: int
    outside_norm: float
    norm: float


def used_rank(matrix: Tensor, inputs: Tensor, rtol: float = SPAN_RTOL) -> UsedRank:
    """The effective rank of ``x @ matrix`` over the inputs' span.

    Args:
        matrix: ``[d_in, d_out]``, read as ``x @ matrix`` (TransformerLens's convention).
        inputs: ``[n, d_in]``, the vectors the matrix is applied to.
        rtol: Input directions with a singular value below ``rtol`` times the largest are not
            in the span (rounding).

    Returns:
        The used and raw effective ranks, the span's dimension and the norm outside it.
    """
    if matrix.ndim != 2 or inputs.ndim != 2 or inputs.shape[1] != matrix.shape[0]:
        raise ValueError(
            f"used_rank needs a [d_in, d_out] matrix and [n, d_in] inputs, got {tuple(matrix.shape)} "
            f"and {tuple(inputs.shape)}"
        )
    matrix, inputs = matrix.detach().double(), inputs.detach().double()
    _, s, vh = torch.linalg.svd(inputs, full_matrices=False)
    basis = vh[s > rtol * s.max()] if s.numel() and s.max() > 0 else vh[:0]  # [span, d_in], orthonormal
    inside = basis.T @ (basis @ matrix)  # the projection of the matrix onto the span
    return UsedRank(
        used=effective_rank(inside),
        raw=effective_rank(matrix),
        span=int(basis.shape[0]),
        outside_norm=float(torch.linalg.norm(matrix - inside)),
        norm=float(torch.linalg.norm(matrix)),
    )


@torch.no_grad()
def model_used_ranks(model: Any, tokens: Tensor) -> pd.DataFrame:
    """The used and raw effective ranks (`used_rank`) of a one-layer hooked transformer without
    LayerNorm on `tokens` (``[batch, pos]``, the answer read at the last position): per head and
    per whole layer (head -1) for ``W_Q``, ``W_K``, ``W_V``; per layer (head -1) for ``W_in``,
    ``W_out``. Columns: ``matrix``, ``head``, then `UsedRank`'s fields.
    """
    _, cache = model.run_with_cache(tokens)
    last = tokens.shape[1] - 1
    embeddings = (cache["hook_embed"] + cache["hook_pos_embed"]).reshape(-1, model.W_E.shape[1])
    reads = {
        "W_Q": cache["blocks.0.hook_resid_pre"][:, last],
        "W_K": embeddings,
        "W_V": embeddings,
        "W_in": cache["blocks.0.hook_resid_mid"][:, last],
        "W_out": cache["blocks.0.mlp.hook_post"][:, last],
    }
    rows = []
    for name in ("W_Q", "W_K", "W_V"):
        weight = getattr(model, name)[0]  # [n_heads, d_model, d_head]
        for head in range(weight.shape[0]):
            rows.append({"matrix": name, "head": head, **vars(used_rank(weight[head], reads[name]))})
        # Whole layer, heads side by side ([d_model, n_heads * d_head]), as `transformer_ranks` reports it.
        whole = weight.permute(1, 0, 2).reshape(weight.shape[1], -1)
        rows.append({"matrix": name, "head": -1, **vars(used_rank(whole, reads[name]))})
    for name in ("W_in", "W_out"):
        rows.append({"matrix": name, "head": -1, **vars(used_rank(getattr(model, name)[0], reads[name]))})
    return pd.DataFrame(rows)


def used_rank_table(models: Mapping[str, str | Path]) -> pd.DataFrame:
    """`model_used_ranks` of each model (whole layers only, head -1), every model read on the
    original task's inputs: all ``p²`` pairs ``[x, y, =]`` of the first model's task (train and
    test; an injected model's new tokens are left out, so each matrix is read where the
    retention is measured).

    Args:
        models: ``{label: checkpoint or run folder}``; the first names the task.

    Returns:
        One row per model and matrix: ``model``, ``matrix``, ``used``, ``raw``, ``span``,
        ``outside_share`` (the norm outside the span over the whole norm).
    """
    from analyses.subject import load_subject

    tokens = None
    rows = []
    for label, path in models.items():
        subject = load_subject(path)
        if tokens is None:
            tokens = torch.cat([subject.split(name).tokens for name in ("train", "test")])
        frame = model_used_ranks(subject.model, tokens)
        frame = frame[frame["head"] == -1].drop(columns="head")
        frame["outside_share"] = frame["outside_norm"] / frame["norm"]
        rows.append(frame.drop(columns=["outside_norm", "norm"]).assign(model=label))
    return pd.concat(rows, ignore_index=True)[["model", "matrix", "used", "raw", "span", "outside_share"]]
