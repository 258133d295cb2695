"""A small TransformerLens-compatible hooked transformer (studies A and B).

TransformerLens 4 drops `HookedTransformer` and keeps `HookedRootModule` + `HookPoint` as the
supported way to hook a module, so this is our own `HookedRootModule` with TransformerLens's
module tree, parameter names, shapes and hook names. What that buys:

* `run_with_hooks`, `run_with_cache` (returning an `ActivationCache`), `hooks()`, and
  `transformer_lens.patching` work on it unchanged;
* `model.QK` / `model.OV` are `FactoredMatrix` objects of shape
  `[n_layers, n_heads, d_model, d_model]`, as in TransformerLens;
* a state dict converts to and from a TransformerLens 3.x `HookedTransformer` by copying
  (`models.convert`).
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, FactoredMatrix, HookedRootModule
from transformer_lens.hook_points import HookPoint

from models.components import Embed, LayerNorm, PosEmbed, TransformerBlock, Unembed
from models.config import TransformerConfig


class Transformer(HookedRootModule):
    """Hooked decoder-only transformer.

    Args:
        cfg: The architecture.
        seed: Seed of the weight initialisation (a local generator; global RNG is untouched).
    """

    def __init__(self, cfg: TransformerConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.hook_embed = HookPoint()  # [batch, pos, d_model]
        if cfg.positional_embedding_type == "standard":
            self.pos_embed = PosEmbed(cfg)
            self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_final: nn.Module = LayerNorm(cfg) if cfg.normalization_type == "LN" else nn.Identity()
        self.unembed = Unembed(cfg)
        self.init_weights(seed)
        self.setup()  # HookedRootModule: builds hook_dict / mod_dict

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Normal(0, `cfg.init_range`) for every `W_*` matrix, zero biases, unit LayerNorm.

        This is TransformerLens's GPT-2 initialisation. Parameters are visited in a fixed
        order so a seed always gives the same model.
        """
        gen = torch.Generator().manual_seed(seed)
        for name, param in self.named_parameters():
            if name.split(".")[-1].startswith("W_"):
                param.copy_(torch.randn(param.shape, generator=gen) * self.cfg.init_range)

    # Hooks may return several copies of the examples (`interp.dissect.interventions` runs many
    # interventions in one pass), so the hooked forwards' outputs have a batch of their own.
    def residual_stream(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch_out pos d_model"]:
        """Return the input to the unembedding (after `ln_final`) at every position."""
        if tokens.ndim != 2:
            raise ValueError(f"tokens must have shape [batch, pos], got {tuple(tokens.shape)}")
        resid = self.hook_embed(self.embed(tokens))
        if self.cfg.positional_embedding_type == "standard":
            resid = resid + self.hook_pos_embed(self.pos_embed(tokens))
        for block in self.blocks:
            resid = block(resid)
        return self.ln_final(resid)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch_out pos d_vocab_out"]:
        """Return logits at every position."""
        return self.unembed(self.residual_stream(tokens))

    def readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch_out d_vocab_out"]:
        """Return logits at the readout (last) position, where every task reads its label."""
        return self.forward(tokens)[:, -1]

    def fast_readout(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab_out"]:
        """Return `readout(tokens)` fast, for training: **no hooks run**.

        Equal to the hooked forward pass to 1e-5 in fp32, differentiable, and honours
        `torch.autocast` (bfloat16); see `models.fast_forward`.
        """
        from models.fast_forward import fast_readout

        return fast_readout(self, tokens)

    def run_with_cache(self, *args, **kwargs) -> tuple[Tensor, ActivationCache]:  # type: ignore[override]
        """Run the model and return `(logits, ActivationCache)`, as TransformerLens does."""
        out, cache_dict = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache_dict, self)

    def _stack(self, module: str, name: str) -> Tensor:
        return torch.stack([getattr(getattr(b, module), name) for b in self.blocks])

    # Weight accessors stacked over layers, as on TransformerLens's HookedTransformer.
    @property
    def W_E(self) -> Float[Tensor, "d_vocab d_model"]:
        return self.embed.W_E

    @property
    def W_pos(self) -> Float[Tensor, "n_ctx d_model"]:
        return self.pos_embed.W_pos

    @property
    def W_U(self) -> Float[Tensor, "d_model d_vocab_out"]:
        return self.unembed.W_U

    @property
    def b_U(self) -> Float[Tensor, " d_vocab_out"]:
        return self.unembed.b_U

    @property
    def W_Q(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn", "W_Q")

    @property
    def W_K(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn", "W_K")

    @property
    def W_V(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        return self._stack("attn", "W_V")

    @property
    def W_O(self) -> Float[Tensor, "n_layers n_heads d_head d_model"]:
        return self._stack("attn", "W_O")

    @property
    def W_in(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        return self._stack("mlp", "W_in")

    @property
    def W_out(self) -> Float[Tensor, "n_layers d_mlp d_model"]:
        return self._stack("mlp", "W_out")

    @property
    def QK(self) -> FactoredMatrix:
        """`W_Q @ W_K^T` per layer and head, shape [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """`W_V @ W_O` per layer and head, shape [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_V, self.W_O)
