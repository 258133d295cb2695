"""The local learning coefficient (LLC) of any `torch.nn.Module` at its current weights.

``llc = n_beta * (E_w[L_n(w)] - L_n(w*))``: how much the loss rises, on average, under the
tempered posterior localized at the checkpoint ``w*`` (Lau et al. 2023; Watanabe's WBIC at
``beta = 1 / log n``). The expectation is over the draws of localized SGLD chains
(`interp.dissect.langevin`); ``L_n(w*)`` is the loss over the **whole** data given, in chunks, not
one minibatch (devinterp PR#39: a one-batch reference loss makes repeated estimates disagree
by more than their reported spread).

The sampled loss is the data loss `loss_fn` gives and nothing else: a training run's weight
decay is not added. AdamW's decoupled decay is no term of any loss, and the LLC is a property
of the data loss; the localization term already plays the prior. With weight decay the
checkpoint is not a minimum of the data loss, so the estimate can come out negative: the
``negative`` flag (`interp.dissect.chain_health`) says so rather than hiding it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from interp.dissect.chain_health import FLAG_TEXT, Health, assess
from interp.dissect.langevin import SAMPLERS, Chains, langevin_step
from interp.dissect.llc_figures import chain_frame, llc_figure
from interp.dissect.weight_parts import restrict_masks

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

LossFn = Callable[[nn.Module, tuple[Tensor, ...]], Tensor]
"""``loss_fn(model, batch) -> mean loss`` (a scalar): `batch` is a tuple of the data's tensors
sliced to the same examples; `model` behaves as the module with the sampled weights."""

StackedLossFn = Callable[[nn.Module, dict[str, Tensor], tuple[Tensor, ...]], Tensor]
"""``stacked(model, params, batch) -> mean loss per chain [chains]``: the same loss as `LossFn`
for several chains in one pass, `params` ``{name: [chains, *shape]}`` (the other weights are the
model's), `batch` the data's tensors as ``[chains, batch, ...]``, each chain's own examples."""

STACK_EXAMPLES = 1024
"""With a `stacked` loss, the chains go through it in groups of about this many examples a pass
(``max(1, STACK_EXAMPLES // batch)`` chains): a pass pays its fixed cost once a group, while a
larger group's tensors outgrow the cache. Measured on 2 loaded cores, whole estimates of
`mpsp-2l2h` at batch 256: 4 chains a pass 4-9% faster than 2, 2 faster than 1
(benchmarks/README.md)."""

REFERENCE_CHUNK = 8192
__all__ = [
    "FLAG_TEXT",
    "Health",
    "LLCEstimate",
    "STACK_EXAMPLES",
    "StackedLossFn",
    "chain_frame",
    "default_n_beta",
    "llc",
    "llc_figure",
    "reference_loss",
]


@dataclass(frozen=True)
class LLCEstimate:
    """An LLC estimate with its chains.

    Attributes:
        estimate: Mean over chains of ``n_beta * (mean draw loss - init_loss)``.
        std: Standard deviation of the per-chain estimates (0 with one chain).
        se: ``std / sqrt(chains)``.
        per_chain: Each chain's estimate.
        losses: Sampled minibatch losses, ``[chains, draws]``.
        init_loss: ``L_n(w*)`` over the whole data.
        n_beta: n * beta used.
        sampled: d, the number of sampled weights.
        health: The diagnostics (`interp.dissect.chain_health`).
        settings: The sampler settings, as given (JSON values).
        seconds: Wall time of the sampling.
    """

    estimate: float
    std: float
    se: float
    per_chain: list[float]
    losses: Tensor
    init_loss: float
    n_beta: float
    sampled: int
    health: Health
    settings: dict[str, Any]
    seconds: float

    def to_frame(self) -> pd.DataFrame:
        """One row per chain (its estimate, mean and last loss) and the shared diagnostics."""
        return chain_frame(self.per_chain, self.losses.numpy(), self.health)

    def figure(self) -> go.Figure:
        """Loss traces, the running estimate over draws, and the estimate with its spread."""
        return llc_figure(
            self.losses.numpy(), self.init_loss, self.n_beta, self.estimate, self.se, "", self.health
        )


def default_n_beta(n: int) -> float:
    """``n / log n``: WBIC's inverse temperature ``beta* = 1 / log n`` (Watanabe 2013) times n."""
    return n / math.log(n) if n > 1 else 1.0


def llc(
    model: nn.Module,
    data: Sequence[Tensor],
    loss_fn: LossFn,
    *,
    step_size: float = 1e-4,
    n_beta: float | None = None,
    localization: float = 100.0,
    chains: int = 4,
    draws: int = 200,
    burn_in: int = 100,
    batch_size: int | None = None,
    seed: int = 0,
    sampler: str = "sgld",
    restrict: str | Sequence[str] | None = None,
    vectorize: bool = True,
    stacked: StackedLossFn | None = None,
) -> LLCEstimate:
    """Estimate the LLC of `model` at its current weights on `data`.

    Args:
        model: Any module (its weights are not changed).
        data: Tensors whose first axis is the n examples, e.g. ``(tokens, labels)``.
        loss_fn: ``(model, batch) -> mean loss`` (see `LossFn`); must be traceable by
            `torch.func.vmap` when `vectorize`.
        step_size: eps of the Langevin step (> 0).
        n_beta: n * beta; None: ``n / log n`` (`default_n_beta`).
        localization: gamma, the pull towards the checkpoint (>= 0).
        chains: Independent chains (>= 1), each on its own minibatches and noise.
        draws: Recorded steps per chain (>= 1), after `burn_in` unrecorded ones.
        burn_in: Steps before recording (>= 0).
        batch_size: Examples per step and chain; None (or >= n): the whole data (full batch).
        seed: Seed of the noise and the minibatches: one seed, bit-identical estimates.
        sampler: ``"sgld"`` or ``"rmsprop"`` (RMSProp-preconditioned SGLD).
        restrict: Sample only these parts (`interp.dissect.weight_parts`); None: every weight.
        vectorize: Step all chains in one `torch.func.vmap` call; False: one call per chain.
        stacked: The loss of `loss_fn` for several chains in one pass (`StackedLossFn`); given,
            it steps the chains in groups of `STACK_EXAMPLES` examples a pass (`vectorize` is
            then ignored). Each chain keeps its own minibatches and noise, drawn from the seed
            as without it; only the gradients' float rounding differs.

    Raises:
        ConfigError: On a setting out of range, or a `restrict` name the model does not have.
    """
    check_settings(step_size, n_beta, localization, chains, draws, burn_in, batch_size, sampler)
    n = int(data[0].shape[0])
    n_beta = default_n_beta(n) if n_beta is None else float(n_beta)
    masks = restrict_masks(model, restrict)
    params = dict(model.named_parameters())
    anchor = {name: params[name].detach() for name in masks}
    sampled = sum(int(params[k].numel() if m is None else m.sum().item()) for k, m in masks.items())
    generator = torch.Generator(device=data[0].device).manual_seed(seed)
    init_loss = reference_loss(model, data, loss_fn)
    state = Chains.start(anchor, masks, chains)
    per_pass = 0 if stacked is None else max(1, min(chains, STACK_EXAMPLES // min(batch_size or n, n)))
    if stacked is not None:
        step = _stacked(model, tuple(data), stacked, per_pass)
    else:
        step = _gradient_fn(model, data, loss_fn, batch_size, vectorize)
    losses = torch.empty(chains, draws, dtype=torch.float64)
    start = time.perf_counter()
    for t in range(burn_in + draws):
        index = None if batch_size is None or batch_size >= n else _batches(generator, n, chains, batch_size)
        grads, loss = step(state.params, index)
        if t >= burn_in:
            losses[:, t - burn_in] = loss.detach().to(torch.float64)
        langevin_step(
            state,
            grads,
            generator,
            step_size=step_size,
            n_beta=n_beta,
            localization=localization,
            sampler=sampler,
        )
    seconds = time.perf_counter() - start
    per_chain = (n_beta * (losses.mean(dim=1) - init_loss)).tolist()
    std = float(torch.tensor(per_chain).std()) if chains > 1 else 0.0
    settings = dict(
        step_size=step_size, n_beta=n_beta, localization=localization, chains=chains, draws=draws,
        burn_in=burn_in, batch_size=batch_size, seed=seed, sampler=sampler, restrict=restrict,
        chains_run="stacked" if stacked is not None else "vmap" if vectorize else "loop",
        chains_per_pass=per_pass or None,
    )  # fmt: skip
    return LLCEstimate(
        estimate=sum(per_chain) / chains,
        std=std,
        se=std / math.sqrt(chains),
        per_chain=per_chain,
        losses=losses,
        init_loss=init_loss,
        n_beta=n_beta,
        sampled=sampled,
        health=assess(losses.numpy(), init_loss, n_beta, sampled),
        settings=settings,
        seconds=seconds,
    )


def check_settings(
    step_size: Any,
    n_beta: Any,
    localization: Any,
    chains: Any,
    draws: Any,
    burn_in: Any,
    batch_size: Any,
    sampler: Any,
) -> None:
    """Refuse settings out of range (one line naming the value and the valid range)."""
    from interp.config import check_choice, check_int, check_real

    check_real("llc", "step_size", step_size, 0, math.inf, low_open=True, high_open=True)
    if n_beta is not None:
        check_real("llc", "n_beta", n_beta, 0, math.inf, low_open=True, high_open=True)
    check_real("llc", "localization", localization, 0, math.inf, high_open=True)
    check_int("llc", "chains", chains, 1)
    check_int("llc", "draws", draws, 1)
    check_int("llc", "burn_in", burn_in, 0)
    if batch_size is not None:
        check_int("llc", "batch_size", batch_size, 1)
    check_choice("llc", "sampler", sampler, SAMPLERS)


@torch.no_grad()
def reference_loss(
    model: nn.Module, data: Sequence[Tensor], loss_fn: LossFn, chunk: int = REFERENCE_CHUNK
) -> float:
    """``L_n(w*)``: the mean loss over all of `data` (chunks weighted by their size), in float64."""
    n = int(data[0].shape[0])
    total = 0.0
    for start in range(0, n, chunk):
        batch = tuple(t[start : start + chunk] for t in data)
        total += float(loss_fn(model, batch).double()) * batch[0].shape[0]
    return total / n


def _batches(generator: torch.Generator, n: int, chains: int, batch_size: int) -> Tensor:
    """Each chain's minibatch: `batch_size` distinct examples, ``[chains, batch_size]``."""
    # The smallest of uniform keys: a random subset without replacement per chain, from one
    # generator. `topk` finds them without sorting all n keys (a full argsort cost ~10% of a
    # sampler step); the same subsets in the same order, but for the order of tied keys.
    keys = torch.rand(chains, n, generator=generator, device=generator.device)
    return keys.topk(batch_size, dim=1, largest=False, sorted=True).indices


class _Bound(nn.Module):
    """`loss_fn` bound to the model as a module, so `torch.func.functional_call` can swap the
    model's weights while `loss_fn` calls any of its methods (``readout``, ``forward``, ...).
    """

    def __init__(self, model: nn.Module, loss_fn: LossFn) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch: tuple[Tensor, ...]) -> Tensor:
        return self.loss_fn(self.model, batch)


def _gradient_fn(
    model: nn.Module, data: Sequence[Tensor], loss_fn: LossFn, batch_size: int | None, vectorize: bool
) -> Callable[[dict[str, Tensor], Tensor | None], tuple[dict[str, Tensor], Tensor]]:
    """``(params [chains, ...], index [chains, batch] or None) -> (grads, losses [chains])``.

    Vectorized: one `torch.func.vmap` of `torch.func.grad` over the chains. Looped: one plain
    autograd pass per chain, outside any `torch.func` transform, so a `loss_fn` built on
    custom autograd functions (our models' `fast_readout`, whose hand-written backward and
    sparse gathers switch themselves off under `torch.func`) runs its fast path.
    """
    from torch.func import functional_call, grad_and_value, vmap

    data = tuple(data)
    if not vectorize:
        return _looped(model, loss_fn, data)
    bound = _Bound(model, loss_fn)

    def one(params: dict[str, Tensor], batch: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        loss = functional_call(bound, {f"model.{k}": v for k, v in params.items()}, (batch,))
        return loss, loss.detach()

    grad_one = grad_and_value(one, has_aux=True)

    def step(params: dict[str, Tensor], index: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        batch = data if index is None else tuple(t[index] for t in data)  # [chains, batch, ...]
        grads, (_, loss) = vmap(grad_one, in_dims=(0, None if index is None else 0))(params, batch)
        return grads, loss

    return step


def _looped(
    model: nn.Module, loss_fn: LossFn, data: tuple[Tensor, ...]
) -> Callable[[dict[str, Tensor], Tensor | None], tuple[dict[str, Tensor], Tensor]]:
    """The step of `_gradient_fn` as a loop over the chains, each one plain autograd pass.

    Each chain's weights are put in place of the model's own for its pass (``param.data``, no
    copy) and the model's are put back after the step, even on an error: the model's
    parameters are the leaves differentiated, without `torch.func.functional_call`'s walk over
    the modules on every call (a tenth of a small model's step).
    """
    own = dict(model.named_parameters())

    def step(params: dict[str, Tensor], index: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        leaves = [own[k] for k in params]
        kept = [(leaf.data, leaf.requires_grad) for leaf in leaves]
        chains = [value.unbind(0) for value in params.values()]  # [param][chain]
        found, losses = [], []
        try:
            for leaf in leaves:
                leaf.requires_grad_(True)
            for c in range(len(chains[0])):
                for leaf, value in zip(leaves, chains, strict=True):
                    leaf.data = value[c]
                batch = data if index is None else tuple(t[index[c]] for t in data)
                with torch.enable_grad():
                    loss = loss_fn(model, batch)
                    # allow_unused: a weight the loss does not reach has gradient zero, as under vmap.
                    found.append(torch.autograd.grad(loss, leaves, allow_unused=True))
                losses.append(loss.detach())
        finally:
            for leaf, (value, requires_grad) in zip(leaves, kept, strict=True):
                leaf.data = value
                leaf.requires_grad_(requires_grad)
        grads = {
            name: torch.stack([torch.zeros_like(leaf) if g[i] is None else g[i] for g in found])
            for i, (name, leaf) in enumerate(zip(params, leaves, strict=True))
        }
        return grads, torch.stack(losses)

    return step


def _stacked(
    model: nn.Module, data: tuple[Tensor, ...], stacked: StackedLossFn, per_pass: int
) -> Callable[[dict[str, Tensor], Tensor | None], tuple[dict[str, Tensor], Tensor]]:
    """The step of `_gradient_fn` on a `StackedLossFn`: `per_pass` chains a plain autograd pass.

    The chains never mix in the loss, so the gradient of the sum of a group's losses with
    respect to its stacked weights is each chain's own gradient.
    """

    def step(params: dict[str, Tensor], index: Tensor | None) -> tuple[dict[str, Tensor], Tensor]:
        chains = next(iter(params.values())).shape[0]
        found, losses = [], []
        for first in range(0, chains, per_pass):
            group = {k: v[first : first + per_pass].detach().requires_grad_(True) for k, v in params.items()}
            size = next(iter(group.values())).shape[0]
            if index is None:
                batch = tuple(t.unsqueeze(0).expand(size, *t.shape) for t in data)
            else:
                batch = tuple(t[index[first : first + size]] for t in data)
            with torch.enable_grad():
                loss = stacked(model, group, batch)
                grads = torch.autograd.grad(loss.sum(), list(group.values()), allow_unused=True)
            # allow_unused: a weight the loss does not reach (e.g. a key bias the scores' softmax
            # cancels) has gradient zero, as in the loop.
            found.append(
                [torch.zeros_like(v) if g is None else g for g, v in zip(grads, group.values(), strict=True)]
            )
            losses.append(loss.detach())
        grads = {name: torch.cat([g[i] for g in found]) for i, name in enumerate(params)}
        return grads, torch.cat(losses)

    return step
