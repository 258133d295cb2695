"""Pruning hidden neurons by an order (e.g. increasing IPR) and the accuracy curve it traces.

A neuron is removed by zeroing its activation at a hook point (e.g. a quadratic MLP's
`hook_post`, the squared hidden layer) inside `interp.dissect.hooks.checked_hooks`; nothing is edited, nothing
stays registered, and a readout that skips the hook (such as `fast_readout`) is an
error. Zeroing `post[:, k]` is exactly zeroing row `k` of the unembedding `W_U`, since
`logits = post @ W_U`.

When every neuron is removed the logits are all zero: `argmax` then returns class 0 for every
example (PyTorch picks the first maximal index), so the accuracy of a fully pruned model is
the fraction of examples whose label is 0, about `1 / n_classes` on balanced labels. That is
the "chance" point of the curve, by that tie-breaking convention.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import checked_hooks
from interp.metrics import evaluate
from interp.splits import Split


def zero_neurons_hook(mask: Float[Tensor, " d_hidden"]) -> Callable[[Tensor, object], Tensor]:
    """A forward hook that multiplies the last dimension by `keep = 1 - mask`.

    Args:
        mask: 1 for neurons to remove, 0 for neurons to keep (float or bool), [d_hidden].
    """
    keep = 1.0 - mask.float()

    def hook(activation: Tensor, hook: object) -> Tensor:
        return activation * keep.to(activation.device, activation.dtype)

    return hook


def removal_counts(d_hidden: int, fractions: Sequence[float]) -> list[int]:
    """Number of neurons removed at each fraction: `round(fraction * d_hidden)`, increasing, unique."""
    counts = sorted({int(round(f * d_hidden)) for f in fractions})
    if counts and not 0 <= counts[0] <= counts[-1] <= d_hidden:
        raise ValueError(f"fractions must lie in [0, 1], got {list(fractions)}")
    return counts


@torch.no_grad()
def prune_curve(
    model: nn.Module,
    order: Int[Tensor, " d_hidden"],
    splits: Mapping[str, Split],
    *,
    hook_name: str = "hook_post",
    fractions: Sequence[float] = tuple(i / 20 for i in range(21)),
    loss: str = "cross_entropy",
    readout: Callable[[Tensor], Tensor] | None = None,
) -> tuple[list[int], list[dict[str, float]]]:
    """Remove neurons in `order` and evaluate every split and group after each removal count.

    Args:
        model: A hooked model (`hooks()` context manager) whose `hook_name` output's last
            dimension indexes the neurons.
        order: Neuron indices, first removed first (a permutation of `range(d_hidden)`).
        splits: The splits (and their groups) to evaluate; labels are scored as stored (e.g.
            corrupted examples against their corrupted labels).
        hook_name: The hook point whose activations are zeroed.
        fractions: Fractions of the neurons to remove (rounded to counts, deduplicated).
        loss: Loss reported beside accuracy (``"cross_entropy"`` or ``"mse"``).
        readout: Tokens -> logits (default: `model.readout`, which must run the hooks).

    Returns:
        The removal counts, and one `interp.metrics.evaluate` record per count.
    """
    d_hidden = len(order)
    if sorted(order.tolist()) != list(range(d_hidden)):
        raise ValueError("order must be a permutation of the neuron indices")
    readout = readout or model.readout
    counts = removal_counts(d_hidden, fractions)
    records = []
    for count in counts:
        mask = torch.zeros(d_hidden)
        mask[order[:count]] = 1.0
        with checked_hooks(model, [(hook_name, zero_neurons_hook(mask))]):
            records.append(evaluate(readout, splits, loss))
    return counts, records
