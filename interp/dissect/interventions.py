"""The intervention engine behind patching and ablation: batched runs with overwritten activations.

An `Intervention` overwrites part of one activation (``act[:, *index] = value``).
`run_interventions` runs many of them over the same inputs in a few large forward passes:
every intervention at block l gets its own copy of the examples, made at
`blocks.{l}.hook_resid_pre`, so blocks before l run once for all of them; interventions can be
restricted to the examples they actually change (`active`), the rest taking `fallback` logits.
Hooks are scoped and checked by `interp.dissect.hooks`: nothing is left registered, and a
hook that does not fire is an error rather than a run without its intervention.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import run_with_checked_hooks

Index = tuple[Any, ...]  # indices into an activation after its batch dimension

# Measured best on mpsp-2l2h (CPU): larger passes fall out of cache, smaller ones pay per-op overhead.
DEFAULT_MAX_ROWS = 4096
_ALL = slice(None)
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


@dataclass(frozen=True)
class Intervention:
    """Overwrite part of one activation: ``act[:, *index] = value``.

    Attributes:
        hook: Full hook name, e.g. ``"blocks.1.attn.hook_z"``.
        index: Index into the activation after its batch dimension (ints and slices).
        value: What to write, broadcastable to ``act[:, *index]``; its first dimension is the
            batch (rows aligned with the run's inputs) unless it has size 1 or no dimensions.
    """

    hook: str
    index: Index
    value: Tensor


def _block_of(hook: str) -> int | None:
    match = _BLOCK.match(hook)
    return int(match.group(1)) if match else None


def _gather_hook(rows: Tensor) -> Callable:
    """Replace the batch by `rows` of it (one copy per patched run; earlier blocks ran once)."""

    def hook(act: Tensor, hook: Any) -> Tensor:
        return act.index_select(0, rows)

    return hook


def _write_hook(writes: tuple[tuple[int, int, Index, Tensor], ...]) -> Callable:
    """Write each `(offset, length, index, value)` into rows ``offset : offset + length``."""

    def hook(act: Tensor, hook: Any) -> Tensor:
        for offset, length, index, value in writes:
            # Basic slicing gives a view, so the write lands in the activation itself.
            act[offset : offset + length][(_ALL, *index)] = value
        return act

    return hook


def _value_rows(value: Tensor, examples: Tensor) -> Tensor:
    """The rows of a per-example value for `examples` (broadcast values as they are)."""
    return value if value.ndim == 0 or value.shape[0] == 1 else value.index_select(0, examples)


def _forward_pass(
    model: nn.Module,
    tokens: Tensor,
    start: int,
    units: Sequence[tuple[Intervention, Tensor]],
    block: int | None,
) -> Tensor:
    """One forward pass on `tokens` (examples ``start:``) running each unit on its own rows.

    Args:
        model: The hooked model.
        tokens: The inputs, [batch, pos].
        start: Index of the first example of `tokens` in the whole batch (for the values' rows).
        units: `(intervention, examples)`, examples indexing the rows of `tokens`.
        block: The block at whose `hook_resid_pre` the examples are copied, one copy per unit
            (None: copy the inputs themselves).

    Returns:
        Readout logits of every row, [sum of len(examples), d_vocab_out], unit after unit.
    """
    rows = torch.cat([examples for _, examples in units])
    writes: dict[str, list] = {}
    offset = 0
    for iv, examples in units:
        value = _value_rows(iv.value, examples + start)
        writes.setdefault(iv.hook, []).append((offset, len(examples), iv.index, value))
        offset += len(examples)
    if block is None:  # no block boundary to copy the batch at: copy the inputs instead
        hooks, tokens = [], tokens.index_select(0, rows)
    else:
        hooks = [(f"blocks.{block}.hook_resid_pre", _gather_hook(rows))]
    hooks += [(name, _write_hook(tuple(w))) for name, w in writes.items()]
    return run_with_checked_hooks(model, tokens, hooks)[:, -1]


def _chunks(units: list[tuple[int, Tensor]], batch: int, max_rows: int):
    """Split `(intervention id, examples)` units into passes of at most `max_rows` rows.

    Every unit of a block goes into the same pass for a chunk of examples, so the blocks
    before it run once per example. Yields `(start, stop, [(id, examples - start)])`.
    """
    size = max(1, max_rows // len(units))
    for start in range(0, batch, size):
        stop = min(batch, start + size)
        part = [(i, e[(e >= start) & (e < stop)] - start) for i, e in units]
        part = [(i, e) for i, e in part if len(e)]
        if part:
            yield start, stop, part


@torch.no_grad()
def run_interventions(
    model: nn.Module,
    tokens: Int[Tensor, "batch pos"],
    interventions: Sequence[Intervention],
    max_rows: int = DEFAULT_MAX_ROWS,
    active: Sequence[Tensor] | None = None,
    fallback: Float[Tensor, "batch d_vocab_out"] | None = None,
) -> Float[Tensor, "n_interventions batch d_vocab_out"]:
    """Readout logits of one run per intervention, batched.

    Interventions at the same block share forward passes: at ``blocks.{l}.hook_resid_pre``
    the batch is replaced by one copy of the examples per intervention (blocks before l run
    once for all copies) and each copy gets its own write. Hooks outside every block
    (``hook_embed``, ...) get copied inputs instead.

    Args:
        model: A TransformerLens-style hooked model (`run_with_hooks`, hook names
            ``blocks.{l}.*``) whose output is logits [batch, pos, d_vocab_out].
        tokens: Inputs of every run, [batch, pos].
        interventions: What to overwrite in each run; values are aligned with `tokens`.
        max_rows: Most rows (copies x examples) in one forward pass (bounds memory).
        active: Optional bool [batch] per intervention: the examples it changes. The others
            are not run and get `fallback` (e.g. where a patch writes the value already there).
        fallback: Readout logits of the unmodified run, [batch, d_vocab_out]; needed with `active`.

    Returns:
        Logits at the last position, [n_interventions, batch, d_vocab_out].
    """
    n, batch = len(interventions), tokens.shape[0]
    if active is None:
        examples = [torch.arange(batch)] * n
    elif fallback is None:
        raise ValueError("run_interventions: the examples that `active` leaves out need `fallback` logits")
    else:
        examples = [torch.nonzero(a).flatten() for a in active]
    out = None if fallback is None else fallback.expand(n, batch, -1).clone()
    by_block: dict[int | None, list[tuple[int, Tensor]]] = {}
    for i, iv in enumerate(interventions):
        if len(examples[i]):
            by_block.setdefault(_block_of(iv.hook), []).append((i, examples[i]))
    for block, units in by_block.items():
        for start, stop, chunk in _chunks(units, batch, max_rows):
            logits = _forward_pass(
                model, tokens[start:stop], start, [(interventions[i], e) for i, e in chunk], block
            )
            if out is None:
                out = logits.new_empty(n, batch, logits.shape[-1])
            for (i, e), part in zip(chunk, logits.split([len(e) for _, e in chunk])):
                out[i, e + start] = part
    return out if out is not None else torch.empty(n, batch, 0)
