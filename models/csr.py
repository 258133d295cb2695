"""Sparse (CSR) forms of the fast forward's gathers, built once per token batch.

`models.fast_forward` reads layer 0 from small tables through index tensors that depend only
on the tokens. Their backward passes sum gradient rows into the table rows they came from.
`Tensor.index_add` does that by sorting the index on every call (torch's CPU `scatter_add`),
and layer 0's attention mix materialises `[batch, pos * heads, d_model]` gathered rows twice.
Here the same sums are sparse-dense products:

* a gather `table[index]` is `onehot(index) @ table`, so its gradient is
  `onehot(index)^T @ grad`: a CSR matrix `[rows, N]` (the index sorted once) times a dense one;
* layer 0's mix `pattern @ table[idx]` is a CSR matrix with `pos * heads` non-zeros a row (the
  pattern) times the table; its gradients are a sampled product (`sampled_addmm`) for the
  pattern and the transposed CSR matrix times the output gradient for the table.

Training on a full batch passes the same tokens every step, so `cached_plan` keeps the index
tensors and their sort for the last few token tensors (keyed by storage, shape and version,
holding a reference so that the storage cannot be reused while cached).

None of this runs under `torch.func` transforms (`vmap` of stacked seeds): sparse tensors have
no batching rules. `wrapped` tells the callers to take their dense path there.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

__all__ = ["IndexPlan", "cached_plan", "enabled", "gather_backward", "mix", "mix_backward", "wrapped"]

# The sparse path; tests switch it off to compare it with the dense one.
ENABLED = True
_CACHE: OrderedDict[tuple, tuple[Tensor, dict[str, Any]]] = OrderedDict()
_CACHE_SIZE = 4


def wrapped(*tensors: Tensor) -> bool:
    """Whether any tensor is a `torch.func` wrapper (under `vmap` / `grad` transforms)."""
    return any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def enabled(*tensors: Tensor) -> bool:
    """Whether the sparse path applies: switched on, CPU fp32 tensors, no `torch.func` transform."""
    return (
        ENABLED
        and not torch.compiler.is_compiling()
        and all(t.device.type == "cpu" for t in tensors)
        and all(t.dtype == torch.float32 for t in tensors if t.is_floating_point())
        and not wrapped(*tensors)
    )


class IndexPlan:
    """A flat index `[N]` into `n_rows` table rows, with its transposed CSR form built lazily.

    Args:
        index: Row numbers `[N]` (int64), each in `0..n_rows-1`.
        n_rows: The table's row count.
    """

    def __init__(self, index: Tensor, n_rows: int) -> None:
        self.index = index.reshape(-1)
        self.n_rows = n_rows
        self._transposed: dict[int, tuple[Tensor, Tensor, Tensor]] = {}

    def transposed(self, k: int = 1) -> tuple[Tensor, Tensor, Tensor]:
        """`(crow [n_rows + 1], order [N], order // k)`: the entries sorted by row (stable), the
        CSR offsets, and each sorted entry's source row when `k` entries share a source row.
        """
        if k not in self._transposed:
            order = torch.argsort(self.index, stable=True)
            counts = torch.bincount(self.index, minlength=self.n_rows)
            crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
            self._transposed[k] = (crow, order, order // k if k > 1 else order)
        return self._transposed[k]

    def sum_rows(self, src: Tensor, weights: Tensor | None = None) -> Tensor:
        """`out[r] = sum of weights[i] * src[i // k] over entries i with index[i] == r`, `[n_rows, C]`.

        `src [M, C]` with `N = k * M` (each source row feeds `k` consecutive entries: e.g. every
        key of one query), `weights [N]` (ones if None).
        """
        crow, order, cols = self.transposed(self.index.numel() // src.shape[0])
        values = weights.reshape(-1)[order] if weights is not None else src.new_ones(order.numel())
        return torch.sparse.mm(_csr(crow, cols, values, (self.n_rows, src.shape[0])), src.contiguous())


def gather_backward(plan: IndexPlan, grad: Tensor) -> Tensor:
    """The gradient of `table[index]` w.r.t. a `[n_rows, C]` table from `grad [N, C]`."""
    if grad.shape[1] == 1:  # one column (a score table): one pass, no sort
        return torch.bincount(plan.index, weights=grad.reshape(-1), minlength=plan.n_rows).unsqueeze(1)
    return plan.sum_rows(grad)


def mix(plan: IndexPlan, pattern: Tensor, table: Tensor, resid: Tensor) -> Tensor:
    """`resid + pattern @ table[index]` row by row, `[M, C]`.

    `pattern [M, k]` (entry `(m, j)` weighs table row `index[m * k + j]`), `table [n_rows, C]`,
    `resid [M, C]`.
    """
    return torch.addmm(
        resid, _rows_matrix(plan, pattern.reshape(-1), table.shape[0], pattern.shape[0]), table
    )


def mix_backward(plan: IndexPlan, pattern: Tensor, table: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """Gradients of `mix` w.r.t. `table` (`[n_rows, C]`) and `pattern` (`[M, k]`) from `grad [M, C]`."""
    m, k = pattern.shape
    matrix = _rows_matrix(plan, pattern.reshape(-1), table.shape[0], m)
    grad_pattern = torch.sparse.sampled_addmm(matrix, grad, table.t(), beta=0.0).values().view(m, k)
    return plan.sum_rows(grad, pattern), grad_pattern


def _rows_matrix(plan: IndexPlan, values: Tensor, n_cols: int, m: int) -> Tensor:
    """The CSR matrix `[m, n_cols]` with `N / m` entries a row at `plan.index` (row-major)."""
    k = plan.index.numel() // m
    crow = torch.arange(0, plan.index.numel() + 1, k, device=values.device)
    return _csr(crow, plan.index, values, (m, n_cols))


def _csr(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A CSR matrix from trusted parts (built here: no invariant check, no "beta" notice)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def cached_plan(tokens: Tensor, name: str, build: Callable[[], Any]) -> Any:
    """`build()` once per token batch and `name` (LRU of the last few token tensors).

    A token tensor is the same batch while its storage, offset, shape, strides and version
    counter are: views of one tensor (`train.tokens[:]`) share the entry, an in-place write
    invalidates it. Tensors under `torch.func` transforms, and anything in inference mode, are
    not cached.
    """
    # Inference tensors cannot be saved for a later backward and have no version counter:
    # nothing of inference mode is cached.
    if (
        wrapped(tokens)
        or tokens.device.type != "cpu"
        or torch.is_inference_mode_enabled()
        or tokens.is_inference()
    ):
        return build()
    key = (
        tokens.untyped_storage().data_ptr(),
        tokens.storage_offset(),
        tuple(tokens.shape),
        tokens.stride(),
        tokens._version,
        tokens.dtype,
    )
    entry = _CACHE.get(key)
    if entry is None:
        entry = _CACHE[key] = (tokens, {})  # the reference keeps the storage from being reused
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    plans = entry[1]
    if name not in plans:
        plans[name] = build()
    return plans[name]
