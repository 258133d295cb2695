"""The hooked building blocks of `models.transformer.Transformer`.

Each component keeps TransformerLens's parameter names, shapes and hook points exactly
(`transformer_lens.components`), so a state dict moves between our models and a
TransformerLens `HookedTransformer` without renaming, and every TransformerLens tool that
addresses hooks by name (`utils.get_act_name`, `patching`) works unchanged. The maths is the
same too, operation for operation, which is what lets the oracle tests demand agreement to
1e-5 in fp32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens.hook_points import HookPoint

from models.config import TransformerConfig


class Embed(nn.Module):
    """Token embedding: `W_E [d_vocab, d_model]`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.W_E = nn.Parameter(torch.empty(cfg.d_vocab, cfg.d_model))

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        """Token embeddings [batch, pos, d_model] (`hook_embed` is applied by the caller)."""
        return self.W_E[tokens]


class PosEmbed(nn.Module):
    """Learned positional embedding: `W_pos [n_ctx, d_model]`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.W_pos = nn.Parameter(torch.empty(cfg.n_ctx, cfg.d_model))

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        """Positional embeddings for every example [batch, pos, d_model]."""
        batch, pos = tokens.shape
        return self.W_pos[:pos].unsqueeze(0).expand(batch, pos, -1)


class LayerNorm(nn.Module):
    """LayerNorm with TransformerLens's `hook_scale` and `hook_normalized`; weights `w`, `b`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.eps = cfg.eps
        self.w = nn.Parameter(torch.ones(cfg.d_model))
        self.b = nn.Parameter(torch.zeros(cfg.d_model))
        self.hook_scale = HookPoint()  # [batch, pos, 1]
        self.hook_normalized = HookPoint()  # [batch, pos, d_model]

    def forward(self, x: Float[Tensor, "... d_model"]) -> Float[Tensor, "... d_model"]:
        """LayerNorm over the last dimension, with `hook_scale` and `hook_normalized`."""
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale) * self.w + self.b


class Attention(nn.Module):
    """Multi-head attention with per-head weights `W_Q, W_K, W_V [n_heads, d_model, d_head]`,
    `W_O [n_heads, d_head, d_model]` and TransformerLens's hooks (`hook_q`, `hook_k`, `hook_v`,
    `hook_attn_scores`, `hook_pattern`, `hook_z`, and `hook_result` when `use_attn_result`).
    """

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.empty(h, d, dh))
        self.W_K = nn.Parameter(torch.empty(h, d, dh))
        self.W_V = nn.Parameter(torch.empty(h, d, dh))
        self.W_O = nn.Parameter(torch.empty(h, dh, d))
        self.b_Q = nn.Parameter(torch.zeros(h, dh))
        self.b_K = nn.Parameter(torch.zeros(h, dh))
        self.b_V = nn.Parameter(torch.zeros(h, dh))
        self.b_O = nn.Parameter(torch.zeros(d))
        self.attn_scale = cfg.d_head**0.5
        self.hook_q = HookPoint()  # [batch, pos, head, d_head]
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_z = HookPoint()
        self.hook_attn_scores = HookPoint()  # [batch, head, query_pos, key_pos]
        self.hook_pattern = HookPoint()
        self.hook_result = HookPoint()  # [batch, pos, head, d_model]

    def forward(
        self,
        query_input: Float[Tensor, "batch pos *head d_model"],
        key_input: Float[Tensor, "batch pos *head d_model"] | None = None,
        value_input: Float[Tensor, "batch pos *head d_model"] | None = None,
    ) -> Float[Tensor, "batch pos d_model"]:
        """Multi-head attention with TransformerLens's hook points (q, k, v, scores, pattern, z, result).

        Args:
            query_input: The (normalised) residual stream [batch, pos, d_model], or one copy per
                head [batch, pos, n_heads, d_model] (`use_split_qkv_input`).
            key_input: Likewise for the keys; defaults to `query_input`.
            value_input: Likewise for the values; defaults to `query_input`.
        """
        key_input = query_input if key_input is None else key_input
        value_input = query_input if value_input is None else value_input
        q = self.hook_q(_project(query_input, self.W_Q, self.b_Q))
        k = self.hook_k(_project(key_input, self.W_K, self.b_K))
        v = self.hook_v(_project(value_input, self.W_V, self.b_V))
        scores = q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1) / self.attn_scale
        if self.cfg.attention_dir == "causal":
            n = scores.shape[-1]
            allowed = torch.ones(n, n, dtype=torch.bool, device=scores.device).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        pattern = self.hook_pattern(F.softmax(self.hook_attn_scores(scores), dim=-1))
        z = self.hook_z((pattern @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3))
        if self.cfg.use_attn_result:
            result = self.hook_result(torch.einsum("bphe,hed->bphd", z, self.W_O))
            return result.sum(dim=2) + self.b_O
        return F.linear(z.flatten(2), self.W_O.flatten(0, 1).T, self.b_O)


def _project(
    x: Tensor, w: Float[Tensor, "head d_model d_head"], b: Float[Tensor, "head d_head"]
) -> Float[Tensor, "batch pos head d_head"]:
    """`x @ W + b` per head: `x` is shared by the heads [batch, pos, d_model] or split
    [batch, pos, head, d_model] (TransformerLens's `simple_attn_linear` / `complex_attn_linear`).

    The shared case is one matmul with the heads side by side, as TransformerLens computes it
    (an einsum over the head axis costs an analysis's forwards a few times more on CPU).
    """
    if x.ndim == 4:
        return torch.einsum("bphd,hde->bphe", x, w) + b
    h, d, e = w.shape
    return F.linear(x, w.permute(1, 0, 2).reshape(d, h * e).T, b.reshape(h * e)).view(*x.shape[:-1], h, e)


class MLP(nn.Module):
    """Two-layer MLP `W_in [d_model, d_mlp]`, `W_out [d_mlp, d_model]` with `hook_pre`, `hook_post`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.W_in = nn.Parameter(torch.empty(cfg.d_model, cfg.d_mlp))
        self.b_in = nn.Parameter(torch.zeros(cfg.d_mlp))
        self.W_out = nn.Parameter(torch.empty(cfg.d_mlp, cfg.d_model))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))
        self.act_fn = _ACTIVATIONS[cfg.act_fn]
        self.hook_pre = HookPoint()  # [batch, pos, d_mlp]
        self.hook_post = HookPoint()

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        """The MLP with hook points `hook_pre` and `hook_post`."""
        pre = self.hook_pre(torch.addmm(self.b_in, x.flatten(0, 1), self.W_in).view(*x.shape[:2], -1))
        post = self.hook_post(self.act_fn(pre))
        return torch.addmm(self.b_out, post.flatten(0, 1), self.W_out).view(*x.shape[:2], -1)


class Unembed(nn.Module):
    """Unembedding `W_U [d_model, d_vocab_out]`, `b_U`, with TransformerLens's `hook_in` / `hook_out`."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.W_U = nn.Parameter(torch.empty(cfg.d_model, cfg.d_vocab_out))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab_out))
        self.hook_in = HookPoint()
        self.hook_out = HookPoint()

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_vocab_out"]:
        """Logits at every position [batch, pos, d_vocab_out]."""
        return self.hook_out(self.hook_in(x) @ self.W_U + self.b_U)


class TransformerBlock(nn.Module):
    """Pre-LN residual block: `resid_mid = resid_pre + attn(ln1(resid_pre))`, then the MLP."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.ln1: nn.Module = LayerNorm(cfg) if cfg.normalization_type == "LN" else nn.Identity()
        self.ln2: nn.Module = LayerNorm(cfg) if cfg.normalization_type == "LN" else nn.Identity()
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.cfg = cfg
        self.hook_resid_pre = HookPoint()  # [batch, pos, d_model]
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()
        # Opt-in, as in TransformerLens: they exist always and fire only with their flag.
        self.hook_q_input = HookPoint()  # [batch, pos, head, d_model] (use_split_qkv_input)
        self.hook_k_input = HookPoint()
        self.hook_v_input = HookPoint()
        self.hook_mlp_in = HookPoint()  # [batch, pos, d_model] (use_hook_mlp_in)

    # The output's batch may differ from the input's: a hook at hook_resid_pre may return several
    # copies of the examples (`interp.dissect.interventions` runs many interventions in one pass).
    def forward(
        self, resid_pre: Float[Tensor, "batch pos d_model"]
    ) -> Float[Tensor, "batch_out pos d_model"]:
        """One block: attention and MLP with their residual adds and hook points."""
        resid_pre = self.hook_resid_pre(resid_pre)
        if self.cfg.use_split_qkv_input:
            # One copy per head (cloned: a hook may write one head's copy in place), normalised
            # separately in TransformerLens's order, so ln1's hooks hold the value input's.
            per_head = resid_pre.unsqueeze(2).expand(-1, -1, self.cfg.n_heads, -1)
            q_in = self.hook_q_input(per_head.clone())
            k_in = self.hook_k_input(per_head.clone())
            v_in = self.hook_v_input(per_head.clone())
            attn_out = self.attn(self.ln1(q_in), self.ln1(k_in), self.ln1(v_in))
        else:
            attn_out = self.attn(self.ln1(resid_pre))
        resid_mid = self.hook_resid_mid(resid_pre + self.hook_attn_out(attn_out))
        mlp_in = self.hook_mlp_in(resid_mid.clone()) if self.cfg.use_hook_mlp_in else resid_mid
        return self.hook_resid_post(resid_mid + self.hook_mlp_out(self.mlp(self.ln2(mlp_in))))


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}
ACTIVATIONS = tuple(_ACTIVATIONS)
