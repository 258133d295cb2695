"""The readout of several weight sets of one `Transformer` at once: chains as a leading dimension.

`stacked_readout(model, params, tokens)` returns, for each of `C` weight sets ("chains", the LLC
sampler's), the logits at the readout position of that chain's own examples:
``out[c] = model_with(params[c])(tokens[c])[:, -1]``. Every weight is a stacked tensor
``[C, *shape]`` (a name missing from `params` is the model's own, shared by every chain), and
every product is a batched one over the chains, so a step of `C` chains pays the forward's
fixed cost (layer 0's tables and the small operations around them, forward and backward)
once instead of `C` times (`benchmarks/llc.py` measures what that buys). Differentiable with
respect to every stacked weight with plain autograd; the chains never mix, so the gradient of
the sum of the chains' losses is each chain's own gradient.

It uses the algebra of the training forward (`models.fast_forward`): layer 0 on tables over
(position, token) gathered per example, the last layer at the readout position only without
keys or values. Besides, every LayerNorm's affine weights are folded into the product that
follows it (``(n * w + b) @ W = n @ (w W) + b @ W``), so no ``[C, batch, pos, d_model]``
affine pass is made, and the last layer's key bias, constant over the keys, is dropped from
the scores (softmax is invariant to it). So the logits equal the hooked forward's to float
rounding (1e-5 in fp32), not bit for bit. No hooks run, no autocast; models of 1 to 2 layers
(`supports`), as all our presets.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

__all__ = ["stacked_readout", "supports"]


def supports(model: nn.Module) -> bool:
    """Whether `stacked_readout` runs `model`: one of our transformers (`models.transformer`, not
    a TransformerLens model: its options are not all ours) of 1 or 2 layers.
    """
    from models.transformer import Transformer

    return isinstance(model, Transformer) and model.cfg.n_layers in (1, 2)


def stacked_readout(
    model: nn.Module, params: Mapping[str, Tensor], tokens: Int[Tensor, "chains batch pos"]
) -> Float[Tensor, "chains batch d_vocab_out"]:
    """The readout logits of each chain's weights on that chain's tokens.

    Args:
        model: A `models.transformer.Transformer` of 1 or 2 layers (`supports`).
        params: ``{name: [chains, *shape]}`` for any of the model's parameter names; the others
            are the model's own (detached), the same for every chain.
        tokens: Token ids ``[chains, batch, pos]``, each chain's own examples.

    Raises:
        ValueError: If the model is not supported or `tokens` is not 3-dimensional.
    """
    if not supports(model) or tokens.ndim != 3:
        raise ValueError(f"stacked_readout needs a 1- or 2-layer transformer and [chains, batch, pos] tokens, "
                         f"got tokens of shape {tuple(tokens.shape)}")  # fmt: skip
    chains, batch, n_pos = tokens.shape
    W = _Weights(model, params, chains)
    cfg, D = model.cfg, model.cfg.d_model
    last = cfg.n_layers - 1
    if cfg.n_layers == 1:
        resid = _layer0(W, cfg, tokens, n_pos - 1)[0].view(chains, batch, D)
    else:
        # Under causal attention position 0 sees its own token only: layer 0 and its MLP run
        # there once per token (a [chains, vocab] table), not once per example.
        first = int(cfg.attention_dir == "causal" and n_pos > 1)
        resid, start = _layer0(W, cfg, tokens, first, start=bool(first))
        resid = _mlp(W, 0, resid.view(chains, -1, D)).view(chains, batch, n_pos - first, D)
        if start is not None:
            V = cfg.d_vocab
            rows = tokens[:, :, 0] + torch.arange(chains, device=tokens.device).unsqueeze(1) * V
            start = _mlp(W, 0, start).view(chains * V, D).index_select(0, rows.view(-1))
            resid = torch.cat([start.view(chains, batch, 1, D), resid], 2)
        resid = _last_attention(W, cfg, last, resid)
    resid = _mlp(W, last, resid)
    return _normed_linear(W, "ln_final", resid, W["unembed.W_U"], W["unembed.b_U"])


class _Weights:
    """Stacked weights by name: ``[chains, *shape]``, from `params` or the model's (expanded)."""

    def __init__(self, model: nn.Module, params: Mapping[str, Tensor], chains: int) -> None:
        self.own = dict(model.named_parameters())
        self.params, self.chains = params, chains
        self.eps = model.cfg.eps
        self.act = [block.mlp.act_fn for block in model.blocks]

    def __getitem__(self, name: str) -> Tensor:
        if name in self.params:
            return self.params[name]
        value = self.own[name].detach()
        return value.unsqueeze(0).expand(self.chains, *value.shape)

    def has(self, name: str) -> bool:
        return name in self.own


def _normed_linear(W: _Weights, ln: str, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``ln(x) @ weight + bias`` for ``x [C, rows, D]``, ``weight [C, D, K]``, ``bias [C, K]``, with
    the LayerNorm's affine folded into the product (`ln` absent: no LayerNorm).
    """
    if not W.has(f"{ln}.w"):
        return torch.baddbmm(bias.unsqueeze(1), x, weight)
    w, b = W[f"{ln}.w"], W[f"{ln}.b"]
    n = F.layer_norm(x, (x.shape[-1],), eps=W.eps)
    folded_bias = torch.baddbmm(bias.unsqueeze(1), b.unsqueeze(1), weight)  # [C, 1, K]
    return torch.baddbmm(folded_bias, n, w.unsqueeze(-1) * weight)


def _normed(W: _Weights, ln: str, x: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """`x` normalised without the affine, and the affine's ``(w, b)`` (None, None: no LayerNorm)."""
    if not W.has(f"{ln}.w"):
        return x, None, None
    return F.layer_norm(x, (x.shape[-1],), eps=W.eps), W[f"{ln}.w"], W[f"{ln}.b"]


def _heads(weight: Tensor) -> Tensor:
    """``[C, heads, d_model, d_head]`` -> ``[C, d_model, heads * d_head]`` (heads side by side)."""
    C, H, D, E = weight.shape
    return weight.permute(0, 2, 1, 3).reshape(C, D, H * E)


def _mlp(W: _Weights, layer: int, resid: Tensor) -> Tensor:
    """``resid + mlp(ln2(resid))`` on ``[C, rows, D]``."""
    p = f"blocks.{layer}."
    pre = _normed_linear(W, p + "ln2", resid, W[p + "mlp.W_in"], W[p + "mlp.b_in"])
    act = W.act[layer]
    post = F.relu_(pre) if act is F.relu else act(pre)  # in place: relu's backward reads its output
    return torch.baddbmm(resid + W[p + "mlp.b_out"].unsqueeze(1), post, W[p + "mlp.W_out"])


def _layer0(
    W: _Weights, cfg, tokens: Tensor, first: int, start: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Layer 0's resid_mid ``[C, batch, pos - first, D]`` at query positions ``first..pos-1``, and
    with `start` (causal attention only) its value at position 0 for every token, ``[C, vocab, D]``.

    As `models.fast_forward`: queries, keys, values, scores and ``v W_O`` are tables over the
    ``pos * vocab`` (position, token) rows, one per chain, gathered per example.
    """
    C, B, n_pos = tokens.shape
    V, D, H, E = cfg.d_vocab, cfg.d_model, cfg.n_heads, cfg.d_head
    PV, S, a = n_pos * V, n_pos - first, "blocks.0.attn."
    X = W["embed.W_E"].unsqueeze(1)  # [C, 1, V, D]
    if cfg.positional_embedding_type == "standard":
        X = X + W["pos_embed.W_pos"][:, :n_pos].unsqueeze(2)
    X = X.expand(C, n_pos, V, D).reshape(C, PV, D)
    weight = torch.cat([_heads(W[a + "W_Q"]), _heads(W[a + "W_K"]), _heads(W[a + "W_V"])], 2)
    bias = torch.cat([W[a + n].reshape(C, H * E) for n in ("b_Q", "b_K", "b_V")], 1)
    q, k, v = _normed_linear(W, "blocks.0.ln1", X, weight, bias).split(H * E, 2)
    q = q[:, first * V :] / E**0.5  # the scale on [C, queries, H*E], not on the scores
    n_q = q.shape[1]
    scores = torch.matmul(q.reshape(C, n_q, H, E).transpose(1, 2), k.reshape(C, PV, H, E).permute(0, 2, 3, 1))
    # Rows of the tables: (position, token); the score table is [C, H, query row, key row].
    dev = tokens.device
    idx = tokens + torch.arange(n_pos, device=dev) * V  # [C, B, pos]
    heads = torch.arange(C, device=dev).view(C, 1, 1) * H + torch.arange(
        H, device=dev
    )  # [C, 1, H]: c * H + h
    query = (idx[:, :, first:] - first * V).unsqueeze(-1)  # [C, B, S, 1]
    rows = (heads.unsqueeze(1) * n_q + query) * PV + idx.permute(2, 0, 1)[
        ..., None, None
    ]  # [key, C, B, S, H]
    logits = scores.view(-1).index_select(0, rows.reshape(-1)).view(n_pos, C * B, S, H)
    if cfg.attention_dir == "causal" and S > 1:  # (the last query sees every key)
        logits = logits.masked_fill(_causal(S, n_pos, first, dev), float("-inf"))
    # Keys first: softmax over the outer dimension runs along rows of C * B * S * H values, where
    # over 6-value rows it cost ~10x as much.
    pattern = F.softmax(logits, dim=0).permute(1, 2, 3, 0).reshape(C * B, S, H * n_pos)
    ov_table = torch.matmul(v.reshape(C, PV, H, E).transpose(1, 2), W[a + "W_O"])  # [C, H, PV, D]
    resid_table = X + W[a + "b_O"].unsqueeze(1)  # [C, PV, D]
    # Position 0 attends to itself alone (pattern 1 on its own row, every head).
    table0 = resid_table[:, :V] + ov_table[:, :, :V].sum(1) if start else None
    ov = ov_table.view(C * H * PV, D).index_select(
        0, ((heads.view(C, 1, H, 1) * PV) + idx.view(C, B, 1, n_pos)).view(-1)
    )
    ov = ov.view(C * B, H * n_pos, D)  # each example's key rows, (head, key) order as `pattern`
    chain_rows = idx[:, :, first:] + torch.arange(C, device=dev).view(C, 1, 1) * PV
    resid = resid_table.view(C * PV, D).index_select(0, chain_rows.reshape(-1))
    if S == 1:  # one query row: a weighted sum, no 1-row matmuls
        return (resid + (pattern.view(C * B, H * n_pos, 1) * ov).sum(1)).view(C, B, 1, D), table0
    return torch.baddbmm(resid.view(C * B, S, D), pattern, ov).view(C, B, S, D), table0


@functools.lru_cache(maxsize=16)
def _causal(S: int, n_pos: int, first: int, device: torch.device) -> Tensor:
    """Where key position p is after query position ``first + s``: ``[n_pos, 1, S, 1]`` (masked)."""
    after = torch.arange(n_pos, device=device).unsqueeze(1) > torch.arange(first, n_pos, device=device)
    return after.view(n_pos, 1, S, 1)


def _last_attention(W: _Weights, cfg, layer: int, resid: Tensor) -> Tensor:
    """The last layer's resid_mid at the readout position, ``[C, batch, D]``, from its
    resid_pre ``[C, batch, pos, D]``, without keys or values (as `models.fast_forward`).

    With ``x = n * w + b`` (``n`` normalised, ``(w, b)`` ln1's affine): the query's scores are
    ``n_p . (w * W_K q) + const`` (the constant over keys p, including ``q . b_K``, dropped: softmax
    ignores it), and since a pattern sums to 1 the mixed row is ``(sum_p pattern_p n_p) * w + b``,
    whose affine goes into ``W_V W_O``.
    """
    C, B, n_pos, D = resid.shape
    H, E, p = cfg.n_heads, cfg.d_head, f"blocks.{layer}."
    n, w, b = _normed(W, p + "ln1", resid)
    resid_last = resid[:, :, -1]
    q = _normed_linear(
        W, p + "ln1", resid_last, _heads(W[p + "attn.W_Q"]), W[p + "attn.b_Q"].reshape(C, H * E)
    )
    qk = torch.matmul(q.view(C, B, H, E).transpose(1, 2), W[p + "attn.W_K"].transpose(2, 3)) / E**0.5
    if w is not None:
        qk = qk * w.view(C, 1, 1, D)  # [C, H, B, D]
    keys = n.reshape(C * B, n_pos, D)
    scores = torch.bmm(keys, qk.transpose(1, 2).reshape(C * B, H, D).transpose(1, 2))  # [C * B, key, H]
    # Keys first for the softmax (see `_layer0`), then back to [C * B, H, key].
    pattern = F.softmax(scores.permute(1, 0, 2).reshape(n_pos, C * B * H), dim=0)
    mixed = torch.bmm(pattern.view(n_pos, C * B, H).permute(1, 2, 0), keys)  # [C * B, H, D]
    W_O = W[p + "attn.W_O"]  # [C, H, E, D]
    ov = torch.matmul(W[p + "attn.W_V"], W_O)  # [C, H, D, D]
    const = torch.bmm(W[p + "attn.b_V"].reshape(C, 1, H * E), W_O.reshape(C, H * E, D)).squeeze(1)
    const = const + W[p + "attn.b_O"]
    if w is not None:
        const = const + torch.bmm(b.unsqueeze(1), ov.sum(1)).squeeze(1)
        ov = w.view(C, 1, D, 1) * ov
    return torch.baddbmm(resid_last + const.unsqueeze(1), mixed.view(C, B, H * D), ov.reshape(C, H * D, D))
