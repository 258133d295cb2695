"""Study C's quadratic MLP as a hooked module.

`h = (W_E_left[m] + W_E_right[n])^2` and `logits = h @ W_U`, no biases. The first layer is
written as two embedding lookups: it is the same function as a matmul over concatenated
one-hots (`[onehot(m), onehot(n)] @ [[U], [V]]`), at a fraction of the cost. Hooks:
`hook_pre` (before the square), `hook_post` (after it) and `hook_logits`, so the same hook
library that dissects the transformers dissects this model.
"""

from __future__ import annotations

import torch
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

    def forward(
        self, tokens: Int[Tensor, "batch pos"]
    ) -> Float[Tensor, "batch_out d_vocab_out"]:  # see Transformer
        """Return logits from the operands `tokens[:, 0]` and `tokens[:, 1]` (any later
        tokens, such as an `=` sign, are ignored).
        """
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens must have shape [batch, pos >= 2], got {tuple(tokens.shape)}")
        pre = self.hook_pre(self.W_E_left[tokens[:, 0]] + self.W_E_right[tokens[:, 1]])
        post = self.hook_post(pre.square())
        return self.hook_logits(post @ self.W_U)

    def readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch_out d_vocab_out"]:
        """Return the logits (the model has a single readout)."""
        return self.forward(tokens)

    def fast_readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab_out"]:
        """Return the logits for training, without running hooks (same maths as `forward`)."""
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ValueError(f"tokens must have shape [batch, pos >= 2], got {tuple(tokens.shape)}")
        return (self.W_E_left[tokens[:, 0]] + self.W_E_right[tokens[:, 1]]).square() @ self.W_U

    def run_with_cache(self, *args, **kwargs) -> tuple[Tensor, ActivationCache]:  # type: ignore[override]
        """Run the model and return `(logits, ActivationCache)`."""
        out, cache_dict = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache_dict, self)
