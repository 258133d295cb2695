"""Localized SGLD and RMSProp-preconditioned SGLD over several chains at once.

The chains sample the tempered, localized posterior around a checkpoint's weights ``w*``

    p(w) ∝ exp(-n_beta * L_n(w) - gamma / 2 * ||w - w*||^2),

with the Euler-Maruyama step of Langevin dynamics (Welling & Teh 2011), each chain on its own
minibatches:

    w <- w - eps / 2 * (n_beta * grad L_B(w) + gamma * (w - w*)) + N(0, eps),

as devinterp's `SGLD` (Lau et al. 2023, "Quantifying degeneracy in singular models via the
learning coefficient"). RMSProp-SGLD (Li et al. 2016, pSGLD) scales the drift by
``G = 1 / (sqrt(V) + delta)``, V the running mean of the squared loss gradient, and the noise
by ``sqrt(G)``, without pSGLD's correction term (as devinterp's `rmsprop_sgld`): it moves
flat and sharp directions alike at one step size, at the price of a small bias while V drifts.

Every chain's parameters are one stacked tensor ``[chains, *shape]`` per parameter, so a step
is one `torch.func.vmap` over the chains (or a loop, for modules vmap cannot trace).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

SAMPLERS = ("sgld", "rmsprop")
RMSPROP_ALPHA, RMSPROP_DELTA = 0.99, 1e-8
"""RMSProp's averaging constant and stabiliser (devinterp's and PyTorch's RMSprop defaults)."""

GradFn = Callable[[dict[str, Tensor], Tensor | None], tuple[dict[str, Tensor], Tensor]]
"""``(params [chains, ...], batch indices [chains, batch] or None) -> (grads, losses [chains])``."""


@dataclass
class Chains:
    """The state of all chains.

    Attributes:
        params: Sampled parameters, ``{name: [chains, *shape]}``.
        anchor: Their values at the checkpoint, ``{name: [*shape]}`` (the localization centre).
        masks: ``{name: mask [*shape] or None}``: where a parameter is sampled (None: all of it).
        square_avg: RMSProp's running mean of squared gradients (empty for SGLD).
    """

    params: dict[str, Tensor]
    anchor: dict[str, Tensor]
    masks: Mapping[str, Tensor | None]
    square_avg: dict[str, Tensor] = field(default_factory=dict)

    @classmethod
    def start(cls, anchor: dict[str, Tensor], masks: Mapping[str, Tensor | None], chains: int) -> Chains:
        """Every chain at the checkpoint."""
        params = {k: v.detach().unsqueeze(0).repeat(chains, *([1] * v.ndim)) for k, v in anchor.items()}
        return cls(params, {k: v.detach().clone() for k, v in anchor.items()}, masks)


def langevin_step(
    chains: Chains,
    grads: dict[str, Tensor],
    generator: torch.Generator,
    *,
    step_size: float,
    n_beta: float,
    localization: float,
    sampler: str,
) -> None:
    """Move every chain one step (in place), given the minibatch loss gradients at its position.

    Args:
        chains: The chains; their `params` (and RMSProp's `square_avg`) are updated.
        grads: ``{name: d L_B / d w}`` per chain, ``[chains, *shape]``.
        generator: The source of the Gaussian noise (one seed: bit-identical reruns).
        step_size: eps.
        n_beta: n * beta, the inverse temperature times the number of examples.
        localization: gamma, the strength of the pull towards ``w*``.
        sampler: ``"sgld"`` or ``"rmsprop"``.
    """
    for name, w in chains.params.items():
        grad = grads[name]
        drift = n_beta * grad + localization * (w - chains.anchor[name])
        noise = torch.randn(w.shape, generator=generator, dtype=w.dtype, device=w.device)
        if sampler == "rmsprop":
            avg = chains.square_avg.get(name)
            avg = (1 - RMSPROP_ALPHA) * grad.square() if avg is None else avg.mul_(RMSPROP_ALPHA)
            if name in chains.square_avg:
                avg.addcmul_(grad, grad, value=1 - RMSPROP_ALPHA)
            chains.square_avg[name] = avg
            precondition = 1 / (avg.sqrt() + RMSPROP_DELTA)
            delta = -step_size / 2 * precondition * drift + (step_size * precondition).sqrt() * noise
        else:
            delta = -step_size / 2 * drift + step_size**0.5 * noise
        mask = chains.masks.get(name)
        w.add_(delta if mask is None else delta * mask)
