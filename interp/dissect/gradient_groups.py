"""Per-group gradient decomposition (docs/concepts/gradients.md).

For two groups of a split's examples (e.g. `consistent` / `opposing` training examples,
or `clean` / `corrupted`), ``g_a`` is the gradient of the mean loss over group a and
``g_b`` the same over group b, for every parameter. Per block of parameters and in total we
report:

* ``cos(g_a, g_b)``: gradient conflict (negative: the groups pull against each other);
* ``|g_a|``, ``|g_b|`` and the group-mean amplification ``|g_b| / |g_a|``;
* the count-weighted amplification ``(n_b |g_b|) / (n_a |g_a|)``;
* the net gradient ``(n_a g_a + n_b g_b) / (n_a + n_b)`` (the full-batch gradient when the
  groups partition the split) and its norm, absolute and relative to
  ``(n_a |g_a| + n_b |g_b|) / (n_a + n_b)`` (0: the groups cancel exactly; 1: they agree).

**The trivial part (docs/concepts/gradients.md).** At any stationary
point of the full-batch loss the net gradient is zero, so ``n_a g_a = -n_b g_b``: the cosine is
-1 and ``|g_b| / |g_a| = n_a / n_b`` (``r / (1 - r)`` for an MPSP train split, 9 at r = 0.9)
*whatever the circuits do*. The count-weighted amplification is exactly the group-mean
amplification divided by that trivial value, so it is 1 there. Only departures from the
identity carry information: a count-weighted amplification away from 1, a cosine away from
-1, a net gradient that does not vanish. A measured 9-17x at r = 0.9 means 1-1.9x relative.

Gradients come from `torch.autograd.grad` (never backward hooks: they would see a caller's hooks), in chunks whose
per-group loss sums are scaled by the group sizes, so memory is bounded and the result equals
the full-batch gradient up to float summation order. Blocks are found from parameter names
(`block_of`), so the same code serves the transformer and the quadratic MLP.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from interp.metrics import per_example_loss

_BLOCK_RULES: tuple[tuple[str, str], ...] = (
    # TransformerLens names: each sublayer owns the LayerNorm in front of it.
    (r"^(embed|pos_embed)\.", "embed"),
    (r"^blocks\.(\d+)\.(attn|ln1)\.", r"blocks.\1.attn"),
    (r"^blocks\.(\d+)\.(mlp|ln2)\.", r"blocks.\1.mlp"),
    (r"^(unembed|ln_final)\.", "unembed"),
    # Top-level weights (the QuadraticMLP's W_E_left, W_E_right, W_U).
    (r"^(W_E|W_pos)", "embed"),
    (r"^(W_U|b_U)", "unembed"),
)


def block_of(name: str) -> str:
    """The block a parameter belongs to, from its name.

    ``embed`` (``W_E``, ``W_pos``), ``blocks.{l}.attn`` (attention with its ``ln1``),
    ``blocks.{l}.mlp`` (MLP with its ``ln2``), ``unembed`` (``W_U`` with ``ln_final``); any
    other parameter is its own module path (the name without its last component), or itself
    when it sits at the top level.
    """
    for pattern, block in _BLOCK_RULES:
        if re.match(pattern, name):
            return re.sub(pattern + ".*$", block, name)
    return name.rsplit(".", 1)[0]


@dataclass(frozen=True)
class GroupGradients:
    """Gradients of the mean loss over each of two groups, per parameter.

    Attributes:
        names: Parameter names, in `named_parameters` order.
        grad_a: ``g_a`` per parameter (shapes of the parameters).
        grad_b: ``g_b`` per parameter.
        n_a: Examples in group a.
        n_b: Examples in group b.
    """

    names: tuple[str, ...]
    grad_a: tuple[Tensor, ...]
    grad_b: tuple[Tensor, ...]
    n_a: int
    n_b: int

    def net(self) -> tuple[Tensor, ...]:
        """``(n_a g_a + n_b g_b) / (n_a + n_b)`` per parameter: the full-batch mean-loss
        gradient when the two groups partition the examples.
        """
        n = self.n_a + self.n_b
        return tuple((self.n_a * a + self.n_b * b) / n for a, b in zip(self.grad_a, self.grad_b))


def group_gradients(
    model: nn.Module,
    tokens: Int[Tensor, "batch pos"],
    labels: Int[Tensor, " batch"],
    mask_a: Bool[Tensor, " batch"],
    mask_b: Bool[Tensor, " batch"],
    loss: str = "cross_entropy",
    chunk: int = 8192,
    readout: Callable[[Tensor], Tensor] | None = None,
) -> GroupGradients:
    """Gradients of the mean loss over group a and over group b, by `torch.autograd.grad`.

    Args:
        model: The model; its parameters that require grad are differentiated. Its ``.grad``
            fields are not touched.
        tokens: Input tokens, shape [batch, pos].
        labels: Targets, shape [batch].
        mask_a: Group a, bool [batch] (need not be disjoint from b).
        mask_b: Group b, bool [batch].
        loss: ``"cross_entropy"`` or ``"mse"`` (`interp.metrics.per_example_loss`).
        chunk: Largest batch differentiated at once.
        readout: Maps tokens to readout logits [batch, d_vocab_out]; default `model.readout`.

    Returns:
        The two gradients per parameter, with the group sizes.

    Raises:
        ValueError: If a group is empty (its mean loss has no gradient).
    """
    n_a, n_b = int(mask_a.sum()), int(mask_b.sum())
    if not (n_a and n_b):
        raise ValueError(f"both groups need examples, got {n_a} and {n_b}")
    readout = model.readout if readout is None else readout
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    grad_a = [torch.zeros_like(p) for p in params]
    grad_b = [torch.zeros_like(p) for p in params]
    with torch.enable_grad(), _deterministic(tokens.device.type == "cpu"):
        for mask, n, acc in ((mask_a, n_a, grad_a), (mask_b, n_b, grad_b)):
            # Each group's own examples only (an example's loss depends on no other example):
            # one forward and one backward over n_a + n_b rows, not two backwards over them all.
            for part_tokens, part_labels in _group_chunks(tokens, labels, mask, chunk):
                losses = per_example_loss(readout(part_tokens), part_labels, loss)
                # Chunk sums divided by the whole group's size add up to the group's mean loss.
                grads = torch.autograd.grad(losses.sum() / n, params, allow_unused=True)
                for total, g in zip(acc, grads):
                    if g is not None:
                        total += g
    names = tuple(name for name, _ in named)
    return GroupGradients(names, tuple(grad_a), tuple(grad_b), n_a, n_b)


# A checkpoint series differentiates the same split at every checkpoint. The fast readout
# builds its index plans once per token tensor (`models.csr.cached_plan`), so new chunk tensors
# at every checkpoint would sort the same indices again (about 5% of a `grads` series): the
# chunks of a group are kept, with the tensors they came from (so their ids stay theirs).
_CHUNKS: OrderedDict[tuple[int, int, int, int], tuple[tuple[int, ...], tuple[Tensor, ...], list]] = (
    OrderedDict()
)
_CHUNKS_SIZE = 4


def _group_chunks(tokens: Tensor, labels: Tensor, mask: Tensor, chunk: int) -> list[tuple[Tensor, Tensor]]:
    """The rows of `mask` as (tokens, labels) chunks of at most `chunk` rows, the same tensors
    on every call with the same unchanged `tokens`, `labels` and `mask`.
    """

    def build() -> list[tuple[Tensor, Tensor]]:
        return [(tokens[part], labels[part]) for part in mask.nonzero().squeeze(1).split(chunk)]

    if any(t.is_inference() for t in (tokens, labels, mask)):  # no version counter to check
        return build()
    key = (id(tokens), id(labels), id(mask), chunk)
    versions = (tokens._version, labels._version, mask._version)
    entry = _CHUNKS.get(key)
    if entry is None or entry[0] != versions:  # new, or written in place since
        entry = _CHUNKS[key] = (versions, (tokens, labels, mask), build())
        while len(_CHUNKS) > _CHUNKS_SIZE:
            _CHUNKS.popitem(last=False)
    _CHUNKS.move_to_end(key)
    return entry[2]


@contextmanager
def _deterministic(enable: bool) -> Iterator[None]:
    """Deterministic algorithms inside the block, the caller's setting restored after.

    On CPU the backward of an embedding lookup (``W_E[tokens]``) accumulates rows in a
    thread-dependent order, so two identical calls differ in the last bits; the CLI and the
    Python API must save identical results. ``warn_only`` keeps ops without a deterministic
    kernel working.
    """
    if not enable:
        yield
        return
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@dataclass(frozen=True)
class GradientStats:
    """Per-block statistics of a `GroupGradients`; index 0 of every tensor is the total.

    Attributes:
        blocks: ``("total", block, ...)`` in parameter order.
        cos: ``cos(g_a, g_b)``, shape [n_blocks + 1].
        norm_a: ``|g_a|``.
        norm_b: ``|g_b|``.
        amp: Group-mean amplification ``|g_b| / |g_a|``.
        amp_weighted: Count-weighted amplification ``(n_b |g_b|) / (n_a |g_a|)`` = `amp` relative
            to the trivial stationary-point value ``n_a / n_b`` (1 at any stationary point).
        net_norm: ``|(n_a g_a + n_b g_b) / (n_a + n_b)|``.
        net_rel: `net_norm` over ``(n_a |g_a| + n_b |g_b|) / (n_a + n_b)``: 0 when the groups
            cancel (stationary point), 1 when they point the same way.
        trivial_amp: ``n_a / n_b`` (``r / (1 - r)`` for an MPSP split).
    """

    blocks: tuple[str, ...]
    cos: Float[Tensor, " n"]
    norm_a: Float[Tensor, " n"]
    norm_b: Float[Tensor, " n"]
    amp: Float[Tensor, " n"]
    amp_weighted: Float[Tensor, " n"]
    net_norm: Float[Tensor, " n"]
    net_rel: Float[Tensor, " n"]
    trivial_amp: float


def _flat_by_block(grads: Sequence[Tensor], blocks: Mapping[str, list[int]]) -> list[Tensor]:
    """One flat float64 vector per block, preceded by the vector of all parameters."""
    flat = [g.detach().double().flatten() for g in grads]
    return [torch.cat(flat)] + [torch.cat([flat[i] for i in index]) for index in blocks.values()]


def gradient_stats(grads: GroupGradients, block: Callable[[str], str] = block_of) -> GradientStats:
    """Cosine, norms, amplifications and net gradient per block and in total.

    Args:
        grads: From `group_gradients`.
        block: Maps a parameter name to its block name (default `block_of`).

    Returns:
        The statistics, total first, then blocks in the order their first parameter appears.
    """
    blocks: dict[str, list[int]] = {}
    for i, name in enumerate(grads.names):
        blocks.setdefault(block(name), []).append(i)
    n_a, n_b = grads.n_a, grads.n_b
    vec_a = _flat_by_block(grads.grad_a, blocks)
    vec_b = _flat_by_block(grads.grad_b, blocks)
    norm_a = torch.stack([v.norm() for v in vec_a])
    norm_b = torch.stack([v.norm() for v in vec_b])
    dot = torch.stack([(a * b).sum() for a, b in zip(vec_a, vec_b)])
    net = torch.stack([((n_a * a + n_b * b) / (n_a + n_b)).norm() for a, b in zip(vec_a, vec_b)])
    amp = norm_b / norm_a
    return GradientStats(
        blocks=("total", *blocks),
        cos=dot / (norm_a * norm_b),
        norm_a=norm_a,
        norm_b=norm_b,
        amp=amp,
        amp_weighted=amp * n_b / n_a,
        net_norm=net,
        net_rel=net / ((n_a * norm_a + n_b * norm_b) / (n_a + n_b)),
        trivial_amp=n_a / n_b,
    )
