"""Collective variables of a model for WLMD: its train loss and held-out smooth accuracy.

`ModelCVs` maps a model's flat parameter vector to ``x = ln(train loss)`` and
``y = 10 * mean sigmoid(k margin)`` on held-out data (margin = correct logit minus the largest
other logit), differentiably, so the sampler (`interp.wlmd.sampler.Sampler`) can push on them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interp.metrics import full_precision
from interp.splits import Split


class ModelCVs:
    """The collective variables of a model, as a function of its flat parameter vector.

    The CVs run `forward`, by default the model's training forward `fast_readout` if it has
    one, else `readout` (for a `models.Transformer`, `models.fast_forward`: for 1 layer, tables
    for everything before attention and the readout position only, the values mixed by one
    `embedding_bag`; no hooks run). Train and held-out rows go through one call. The CVs work
    under `torch.func.vmap` over stacked flat parameters (the sampler's vectorised engine).
    That the CVs and the forces equal the hooked forward's to 1e-5 is tested in
    `tests/oracle/test_wlmd.py`.

    Args:
        model: A model with `readout` (its `fast_readout` is used if present); not modified.
        train: The split whose mean cross-entropy gives ``x = ln(loss)``.
        heldout: The split whose margins give ``y = 10 * mean sigmoid(k * margin)``.
        k: Sharpness of the smooth accuracy (about 5-7 keeps y informative near full accuracy).
        forward: ``(model, tokens [batch, pos]) -> readout logits [batch, d_vocab_out]``,
            differentiable in the model's parameters (called under `torch.func.functional_call`).
    """

    def __init__(
        self,
        model: nn.Module,
        train: Split,
        heldout: Split,
        k: float = 6.0,
        *,
        forward: Callable[[nn.Module, Tensor], Tensor] | None = None,
    ) -> None:
        self.model, self.train, self.heldout, self.k = model, train, heldout, k
        self.params = [(name, p.shape) for name, p in model.named_parameters() if p.requires_grad]
        self._call = _Readout(model, forward)
        # One forward over train + held-out (thousands of rows) instead of two: the fast
        # forward's tables are built once per step, and the matmuls get one larger batch.
        same_shape = train.tokens.shape[1:] == heldout.tokens.shape[1:]
        self._tokens = torch.cat([train.tokens, heldout.tokens]) if same_shape else None

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters (and of the flat vectors the CVs take)."""
        return next(p.device for _, p in self.model.named_parameters())

    def flatten(self) -> Tensor:
        """The model's current parameters as one vector [P]."""
        return torch.cat([p.detach().flatten() for _, p in self.model.named_parameters() if p.requires_grad])

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """``{name: tensor}`` views of `theta` in the model's shapes."""
        out, start = {}, 0
        for name, shape in self.params:
            n = shape.numel()
            out[name] = theta[start : start + n].view(shape)
            start += n
        return out

    def state_dict(self, theta: Tensor) -> dict[str, Tensor]:
        """A full state dict of the model with parameters `theta` (for `save_checkpoint`)."""
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        state.update({k: v.detach().clone() for k, v in self.unflatten(theta).items()})
        return state

    def __call__(self, theta: Tensor) -> Tensor:
        """The collective variables ``(x, y)`` [2] of the flat parameters `theta` [P], differentiably."""
        params = {f"model.{k}": v for k, v in self.unflatten(theta).items()}
        if self._tokens is not None:
            both = full_precision(torch.func.functional_call(self._call, params, (self._tokens,)))
            logits, held = both[: len(self.train.labels)], both[len(self.train.labels) :]
        else:
            logits = full_precision(torch.func.functional_call(self._call, params, (self.train.tokens,)))
            held = full_precision(torch.func.functional_call(self._call, params, (self.heldout.tokens,)))
        x = F.cross_entropy(logits, self.train.labels).log()
        return torch.stack([x, 10 * torch.sigmoid(self.k * margins(held, self.heldout.labels)).mean()])


def margins(logits: Tensor, labels: Tensor) -> Tensor:
    """Correct logit minus the largest other logit, per example [batch]."""
    correct = logits.gather(1, labels[:, None])[:, 0]
    other = logits.masked_fill(F.one_hot(labels, logits.shape[1]).bool(), float("-inf")).amax(1)
    return correct - other


class _Readout(nn.Module):
    def __init__(self, model: nn.Module, forward: Callable[[nn.Module, Tensor], Tensor] | None) -> None:
        super().__init__()
        self.model, self.readout_fn = model, forward

    def forward(self, tokens: Tensor) -> Tensor:
        if self.readout_fn is not None:
            return self.readout_fn(self.model, tokens)
        return (getattr(self.model, "fast_readout", None) or self.model.readout)(tokens)
