"""Study C's quadratic MLP as a hooked module.

`h = (W_E_left[m] + W_E_right[n])^2` and `logits = h @ W_U`, no biases. The first layer is
written as two embedding lookups: it is the same function as a matmul over concatenated
one-hots (`[onehot(m), onehot(n)] @ [[U], [V]]`), at a fraction of the cost. Hooks:
`hook_pre` (before the square), `hook_post` (after it) and `hook_logits`, so the same hook
library that dissects the transformers dissects this model.

Training uses `fast_readout`, the same function with a hand-written backward: a study-C step
is three `[examples, width] x [width, p]` products, and autograd's graph around them (an
`index_put_` accumulation per lookup, a `pow` backward, copies) cost as much again. Under
`torch.autocast(..., dtype=torch.bfloat16)` the three products run in bf16; the lookups, the
square, the gradient accumulation and the weights stay fp32.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, HookedRootModule
from transformer_lens.hook_points import HookPoint

from models.config import QuadraticMLPConfig


class QuadraticMLP(HookedRootModule):
    """Hooked `x^2` MLP on the first two tokens of each example.

    Args:
        cfg: The architecture.
        seed: Seed of the weight initialisation (normal, std `cfg.init_std`, for every tensor).
    """

    def __init__(self, cfg: QuadraticMLPConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.W_E_left = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_hidden))
        self.W_E_right = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_hidden))
        self.W_U = nn.Parameter(torch.empty(cfg.d_hidden, cfg.d_vocab_out))
        self.hook_pre = HookPoint()  # [batch, d_hidden]
        self.hook_post = HookPoint()  # [batch, d_hidden]
        self.hook_logits = HookPoint()  # [batch, d_vocab_out]
        self.init_weights(seed)
        self.setup()

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Normal(0, `cfg.init_std`) for every weight, from a local generator."""
        gen = torch.Generator().manual_seed(seed)
        for param in self.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * self.cfg.init_std)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab_out"]:
        """Return logits from the operands `tokens[:, 0]` and `tokens[:, 1]` (any later
        tokens, such as an `=` sign, are ignored).
        """
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens must have shape [batch, pos >= 2], got {tuple(tokens.shape)}")
        pre = self.hook_pre(_lookup_sum(self.W_E_left, self.W_E_right, tokens[:, 0], tokens[:, 1]))
        post = self.hook_post(pre.square())
        return self.hook_logits(post @ self.W_U)

    def readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab_out"]:
        """Return the logits (the model has a single readout)."""
        return self.forward(tokens)

    def fast_readout(
        self, tokens: Int[Tensor, "batch pos"], *, minibatch: bool = False
    ) -> Float[Tensor, "batch d_vocab_out"]:
        """Return the logits for training, without running hooks (same maths as `forward`).

        Honours an enclosing `torch.autocast` (bf16 products, fp32 logits); see the module docstring.
        `minibatch` is accepted for the transformer's signature (`models.fast_forward`): this
        forward keeps nothing per batch, so a batch used once costs what any does.
        """
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens must have shape [batch, pos >= 2], got {tuple(tokens.shape)}")
        device_type = tokens.device.type
        autocast = torch.is_autocast_enabled(device_type)
        cdt = torch.get_autocast_dtype(device_type) if autocast else self.W_U.dtype
        with torch.autocast(device_type, enabled=False):
            logits, *_ = _QuadraticReadout.apply(
                self.W_E_left, self.W_E_right, self.W_U, tokens[:, 0], tokens[:, 1], cdt
            )
            return logits

    def run_with_cache(self, *args, **kwargs) -> tuple[Tensor, ActivationCache]:  # type: ignore[override]
        """Run the model and return `(logits, ActivationCache)`."""
        out, cache_dict = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache_dict, self)


class _QuadraticReadout(torch.autograd.Function):
    """`(W_L[m] + W_R[n])^2 @ W_U` with its gradients written out.

    `m`, `n`: operand ids `[batch]`; returns logits `[batch, d_vocab_out]` in `W_U`'s dtype (the
    products in `cdt`), the pre-activations `[batch, width]` (fp32) and their squares (in `cdt`),
    the last two kept for backward.
    Backward: `dW_U = h^T g`, `dpre = 2 pre * (g W_U^T)` (the 2 folded into the small `W_U`,
    exactly), and the lookups' gradients by `index_add` in fp32. Out-of-place accumulation and
    a generated vmap rule keep it usable under `torch.func.vmap` (vectorised seeds).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(
        W_L: Tensor,
        W_R: Tensor,
        W_U: Tensor,
        m: Tensor,
        n: Tensor,  # type: ignore[override]
        cdt: torch.dtype,
    ) -> tuple[Tensor, Tensor, Tensor]:
        pre = _lookup_sum(W_L, W_R, m, n)  # [batch, width]
        h = pre.square() if cdt == pre.dtype else pre.square().to(cdt)
        logits = h @ W_U if cdt == W_U.dtype else (h @ W_U.to(cdt)).to(W_U.dtype)
        return logits, pre, h  # `pre` and `h` are returned only to be saved for backward (torch.func style)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[override]
        W_L, W_R, W_U, m, n, cdt = inputs
        ctx.save_for_backward(W_U, m, n, output[1], output[2])
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.shapes, ctx.cdt = (W_L.shape, W_R.shape), cdt

    @staticmethod
    def backward(ctx, grad: Tensor, *_: Tensor):  # type: ignore[override]
        W_U, m, n, pre, h = ctx.saved_tensors
        cdt = ctx.cdt
        g, U2 = grad.to(cdt), (2 * W_U).to(cdt)
        grad_U = (g.t() @ h).t().to(W_U.dtype)  # (g^T h)^T: the faster layout for both fp32 and bf16 kernels
        grad_pre = (g @ U2.t()).to(pre.dtype).mul_(pre)  # [batch, width]: 2 * (g W_U^T) * pre, in fp32
        # Out of place: under vmap `grad_pre` is batched while a fresh zeros tensor is not.
        grad_L = torch.zeros(ctx.shapes[0], dtype=pre.dtype, device=pre.device).index_add(0, m, grad_pre)
        grad_R = torch.zeros(ctx.shapes[1], dtype=pre.dtype, device=pre.device).index_add(0, n, grad_pre)
        return grad_L, grad_R, grad_U, None, None, None


def _lookup_sum(W_L: Tensor, W_R: Tensor, m: Tensor, n: Tensor) -> Tensor:
    """`W_L[m] + W_R[n]`, `[batch, width]`, as one `embedding_bag` over the stacked tables: one
    pass that writes the sum (two lookups and an add write three `[batch, width]` tensors).
    """
    rows = torch.stack([m, n + W_L.shape[0]], 1)
    with warnings.catch_warnings():  # vmap (vectorised seeds) loops over seeds for it, on purpose
        warnings.filterwarnings("ignore", message="There is a performance drop")
        return F.embedding_bag(rows, torch.cat([W_L, W_R]), mode="sum")
