"""A small TransformerLens-compatible hooked transformer (studies A and B).

TransformerLens 4 drops `HookedTransformer` and keeps `HookedRootModule` + `HookPoint` as the
supported way to hook a module, so this is our own `HookedRootModule` with TransformerLens's
module tree, parameter names, shapes and hook names. What that buys:

* `run_with_hooks`, `run_with_cache` (returning an `ActivationCache`), `hooks()`, and
  `transformer_lens.patching` work on it unchanged;
* `ActivationCache`'s analysis methods (`decompose_resid`, `get_full_resid_decomposition`,
  `logit_attrs`, `stack_neuron_results`, `accumulated_resid(apply_ln=True)`) work too: the
  model has the attributes they read (`tokens_to_residual_directions` for class labels,
  `accumulated_bias`, stacked biases, `cfg.attn_only`);
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

    def fast_readout(
        self, tokens: Int[Tensor, "batch pos"], *, minibatch: bool = False
    ) -> Float[Tensor, "batch d_vocab_out"]:
        """Return `readout(tokens)` fast, for training: **no hooks run**.

        Equal to the hooked forward pass to 1e-5 in fp32, differentiable, and honours
        `torch.autocast` (bfloat16); see `models.fast_forward` (`minibatch`: a random batch
        used once, as the LLC sampler's).
        """
        from models.fast_forward import fast_readout

        return fast_readout(self, tokens, minibatch=minibatch)

    def run_with_cache(self, *args, **kwargs) -> tuple[Tensor, ActivationCache]:  # type: ignore[override]
        """Run the model and return `(logits, ActivationCache)`, as TransformerLens does."""
        out, cache_dict = super().run_with_cache(*args, **kwargs)
        return out, ActivationCache(cache_dict, self)

    def _stack(self, module: str, name: str) -> Tensor:
        return torch.stack([getattr(getattr(b, module), name) for b in self.blocks])

    # Weight accessors stacked over layers, as on TransformerLens's HookedTransformer.
    @property
    def W_E(self) -> Float[Tensor, "d_vocab d_model"]:
        """Token embedding [d_vocab, d_model]."""
        return self.embed.W_E

    @property
    def W_pos(self) -> Float[Tensor, "n_ctx d_model"]:
        """Positional embedding [n_ctx, d_model]."""
        return self.pos_embed.W_pos

    @property
    def W_U(self) -> Float[Tensor, "d_model d_vocab_out"]:
        """Unembedding [d_model, d_vocab_out]."""
        return self.unembed.W_U

    @property
    def b_U(self) -> Float[Tensor, " d_vocab_out"]:
        """Unembedding bias [d_vocab_out]."""
        return self.unembed.b_U

    @property
    def W_Q(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Query weights of every layer [n_layers, n_heads, d_model, d_head]."""
        return self._stack("attn", "W_Q")

    @property
    def W_K(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Key weights of every layer [n_layers, n_heads, d_model, d_head]."""
        return self._stack("attn", "W_K")

    @property
    def W_V(self) -> Float[Tensor, "n_layers n_heads d_model d_head"]:
        """Value weights of every layer [n_layers, n_heads, d_model, d_head]."""
        return self._stack("attn", "W_V")

    @property
    def W_O(self) -> Float[Tensor, "n_layers n_heads d_head d_model"]:
        """Output weights of every layer [n_layers, n_heads, d_head, d_model]."""
        return self._stack("attn", "W_O")

    @property
    def W_in(self) -> Float[Tensor, "n_layers d_model d_mlp"]:
        """MLP input weights of every layer [n_layers, d_model, d_mlp]."""
        return self._stack("mlp", "W_in")

    @property
    def W_out(self) -> Float[Tensor, "n_layers d_mlp d_model"]:
        """MLP output weights of every layer [n_layers, d_mlp, d_model]."""
        return self._stack("mlp", "W_out")

    @property
    def b_Q(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        """Query biases of every layer [n_layers, n_heads, d_head]."""
        return self._stack("attn", "b_Q")

    @property
    def b_K(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        """Key biases of every layer [n_layers, n_heads, d_head]."""
        return self._stack("attn", "b_K")

    @property
    def b_V(self) -> Float[Tensor, "n_layers n_heads d_head"]:
        """Value biases of every layer [n_layers, n_heads, d_head]."""
        return self._stack("attn", "b_V")

    @property
    def b_O(self) -> Float[Tensor, "n_layers d_model"]:
        """Attention output biases of every layer [n_layers, d_model]."""
        return self._stack("attn", "b_O")

    @property
    def b_in(self) -> Float[Tensor, "n_layers d_mlp"]:
        """MLP input biases of every layer [n_layers, d_mlp]."""
        return self._stack("mlp", "b_in")

    @property
    def b_out(self) -> Float[Tensor, "n_layers d_model"]:
        """MLP output biases of every layer [n_layers, d_model]."""
        return self._stack("mlp", "b_out")

    def tokens_to_residual_directions(self, tokens: int | Int[Tensor, "..."]) -> Float[Tensor, "... d_model"]:
        """The unembedding direction `W_U[:, label]` of each output class, as in TransformerLens.

        Our outputs are class labels (``0 .. d_vocab_out - 1``), not tokenizer tokens, so labels
        are given as ints or integer tensors (``[]``, ``[batch]`` or ``[batch, pos]``). Like
        TransformerLens's, the direction ignores `ln_final`'s weight: TransformerLens expects
        LayerNorm folded into `W_U`; `interp.dissect.logit_attribution` folds it in itself.

        Raises:
            TypeError: For a string (there is no tokenizer).
        """
        if isinstance(tokens, str):
            raise TypeError(f"{tokens!r}: interp models have no tokenizer; pass class labels (ints, tensors)")
        if isinstance(tokens, Tensor) and tokens.numel() > 1:
            return self.W_U[:, tokens].movedim(0, -1)
        return self.W_U[:, int(tokens)]

    def accumulated_bias(
        self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True
    ) -> Float[Tensor, " d_model"]:
        """Sum of the output biases (`b_O`, and `b_out` unless excluded) written before `layer`.

        TransformerLens's `HookedTransformer.accumulated_bias`, which
        `ActivationCache.get_full_resid_decomposition` calls.

        Args:
            layer: In ``[0, n_layers]``: the blocks before it contribute.
            mlp_input: Also add `layer`'s own `b_O` (the input of that layer's MLP).
            include_mlp_biases: Add the MLPs' `b_out` too.
        """
        total = torch.zeros(self.cfg.d_model, device=self.W_U.device, dtype=self.W_U.dtype)
        for block in self.blocks[:layer]:
            total = total + block.attn.b_O + (block.mlp.b_out if include_mlp_biases else 0)
        if mlp_input:
            if layer >= self.cfg.n_layers:
                raise ValueError(f"mlp_input needs a layer below n_layers={self.cfg.n_layers}, got {layer}")
            total = total + self.blocks[layer].attn.b_O
        return total

    @property
    def QK(self) -> FactoredMatrix:
        """`W_Q @ W_K^T` per layer and head, shape [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """`W_V @ W_O` per layer and head, shape [n_layers, n_heads, d_model, d_model]."""
        return FactoredMatrix(self.W_V, self.W_O)
