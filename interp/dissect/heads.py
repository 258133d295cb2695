"""Circuit fingerprints of attention heads (docs/concepts/fingerprints.md).

The MPSP mechanism has two phases told apart by what each head does at the readout position
(the SEP token, last position):

* **QK Spearman rho** (the max-shortcut circuit sorts keys by magnitude): rank correlation
  between the attention score a head gives a key and that key's token value. From the weights
  (`qk_scores_from_weights`, `qk_rho_from_weights`) and empirically over a split
  (`readout_patterns` + `qk_rho_empirical`).
* **Attention to position 0** (the first-shortcut circuit): the mean attention weight from the
  readout position to position 0 over a split (`attention_to_first`).
* **OV parity rho** (the ingredient of the true rule): how strongly what a head writes for a
  token, projected on the unembedding's label directions, separates tokens by ``value mod m``
  (`ov_parity_rho`).

Weights-based measures and the **direct-path approximation.** At layer 0 the residual input
of a token ``v`` at position ``p`` is exactly ``W_E[v] + W_pos[p]``, and we pass it through the
layer's ``ln1``: the scores are exactly the model's. For a later layer ``l`` the input also
holds the outputs of earlier layers, which depend on the whole sequence, so no per-token input
exists. We use the *direct path*: the same embedding ``W_E[v] + W_pos[p]`` through layer
``l``'s own ``ln1``, ignoring everything earlier layers add. It is exact when earlier layers
write nothing, and it measures what the head does with the token identity the embedding
carries straight to it (the skip connection), not with features composed by earlier heads;
a head that sorts by a composed feature shows up in the empirical rho instead.

The readers of a head's output are approximated the same way: a head's write goes straight to
the unembedding through ``ln_final`` with its per-example scale ignored, i.e. ``W_U`` with
``ln_final.w`` folded in and centred over ``d_model`` (LayerNorm removes the mean), as
TransformerLens's ``fold_ln`` does. The model is duck-typed: any module with TransformerLens's
weight names (``W_E``, ``W_pos``, ``blocks[l].ln1``, ``blocks[l].attn.W_Q`` ..., ``W_U``,
``ln_final``) works.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import cache_activations
from interp.dissect.rank_stats import rank_biserial, spearman


def readout_layout(
    model: nn.Module, readout_token: int | None = None, n_pos: int | None = None
) -> tuple[int, int, Tensor]:
    """Where the readout is and which token values the keys can hold.

    Args:
        model: A hooked transformer.
        readout_token: The readout (SEP) token id; default the last input token, ``d_vocab - 1``
            (MPSP's ``SEP = V``).
        n_pos: Sequence length; default ``n_ctx``. The readout is at position ``n_pos - 1``.

    Returns:
        ``(readout_token, n_pos, values)``: values int64 [V] are every input token id except the
        readout token, in increasing order (MPSP: the integers ``0..V-1``).
    """
    cfg = model.cfg
    readout_token = cfg.d_vocab - 1 if readout_token is None else int(readout_token)
    n_pos = cfg.n_ctx if n_pos is None else int(n_pos)
    ids = torch.arange(cfg.d_vocab)
    return readout_token, n_pos, ids[ids != readout_token]


def _embedding(model: nn.Module, tokens: Int[Tensor, "*shape"], positions: Int[Tensor, "*shape"]) -> Tensor:
    """``W_E[tokens] + W_pos[positions]`` (no ``W_pos`` without positional embeddings)."""
    resid = model.W_E[tokens]
    if getattr(model.cfg, "positional_embedding_type", "standard") == "standard":
        resid = resid + model.W_pos[positions]
    return resid


def _direct_inputs(
    model: nn.Module, layer: int, values: Tensor, readout_token: int, n_pos: int
) -> tuple[Tensor, Tensor]:
    """Direct-path inputs of `layer`'s attention (exact at layer 0).

    Returns:
        ``(query [d_model], keys [n_pos - 1, V, d_model])``: ``ln1`` of the readout token's
        embedding at the last position, and of every value at every earlier position.
    """
    ln1 = model.blocks[layer].ln1
    pos = torch.arange(n_pos - 1)
    keys = _embedding(model, values[None, :].expand(n_pos - 1, -1), pos[:, None].expand(-1, len(values)))
    query = _embedding(model, torch.tensor(readout_token), torch.tensor(n_pos - 1))
    return ln1(query), ln1(keys)


@torch.no_grad()
def qk_scores_from_weights(
    model: nn.Module, readout_token: int | None = None, n_pos: int | None = None
) -> Float[Tensor, "n_layers n_heads key_pos n_values"]:
    """Attention scores (before softmax) from the readout position to every (position, value) key.

    Layer 0 is exact: equal to ``hook_attn_scores[:, h, -1, p]`` of a forward pass on a sequence
    holding value ``v`` at position ``p``. Later layers use the direct path (module docstring).

    Args:
        model: A hooked transformer.
        readout_token: See `readout_layout`.
        n_pos: See `readout_layout`.

    Returns:
        Scores, shape [n_layers, n_heads, n_pos - 1, V] (key positions ``0..n_pos-2``, values
        as in `readout_layout`).
    """
    readout_token, n_pos, values = readout_layout(model, readout_token, n_pos)
    out = []
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        query, keys = _direct_inputs(model, layer, values, readout_token, n_pos)
        q = torch.einsum("d,hde->he", query, attn.W_Q) + attn.b_Q
        k = torch.einsum("pvd,hde->hpve", keys, attn.W_K) + attn.b_K[:, None, None, :]
        scale = getattr(attn, "attn_scale", model.cfg.d_head**0.5)
        out.append(torch.einsum("he,hpve->hpv", q, k) / scale)
    return torch.stack(out)


def qk_rho_from_weights(
    model: nn.Module, readout_token: int | None = None, n_pos: int | None = None
) -> tuple[Float[Tensor, "n_layers n_heads"], Float[Tensor, "n_layers n_heads key_pos"]]:
    """Spearman rho between a head's weights-based attention score and the key's token value.

    Returns:
        ``(pooled, per_position)``: rho over all (position, value) keys pooled, shape
        [n_layers, n_heads]; and rho over values at each key position, [n_layers, n_heads,
        n_pos - 1]. +1: the head attends more to larger tokens at the readout (the max
        shortcut's magnitude sorting).
    """
    readout_token, n_pos, values = readout_layout(model, readout_token, n_pos)
    scores = qk_scores_from_weights(model, readout_token, n_pos)
    value_grid = values.double().expand(scores.shape)
    pooled = spearman(scores.flatten(-2), value_grid.flatten(-2))
    return pooled, spearman(scores, value_grid)


@torch.no_grad()
def readout_patterns(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], chunk: int = 4096
) -> Float[Tensor, "batch n_layers n_heads pos"]:
    """Attention patterns from the readout (last) position, for every layer and head.

    Records only the patterns (`interp.dissect.hooks.cache_activations`: no hook outlives the
    call, and a pattern hook that does not fire is an error).

    Args:
        model: A hooked transformer.
        tokens: Input tokens, shape [batch, pos].
        chunk: Largest batch run at once.

    Returns:
        Attention weights, shape [batch, n_layers, n_heads, pos] (rows sum to 1).
    """
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.cfg.n_layers)]
    out = []
    for start in range(0, len(tokens), chunk):
        _, cache = cache_activations(model, tokens[start : start + chunk], names)
        out.append(torch.stack([cache[name][:, :, -1, :] for name in names], dim=1))
    return torch.cat(out)


def qk_rho_empirical(
    patterns: Float[Tensor, "batch n_layers n_heads pos"], tokens: Int[Tensor, "batch pos"]
) -> Float[Tensor, "n_layers n_heads"]:
    """Spearman rho between the readout's attention weight on a key and the key's token value.

    Pooled over examples and key positions ``0..pos-2`` (the readout itself is not a key).

    Args:
        patterns: From `readout_patterns`, shape [batch, n_layers, n_heads, pos].
        tokens: The same examples' tokens, shape [batch, pos].

    Returns:
        rho, shape [n_layers, n_heads].
    """
    weights = patterns[..., :-1].permute(1, 2, 0, 3).flatten(-2)  # [L, H, batch * (pos - 1)]
    return spearman(weights, tokens[:, :-1].flatten().double())


def attention_to_first(
    patterns: Float[Tensor, "batch n_layers n_heads pos"],
) -> Float[Tensor, "n_layers n_heads"]:
    """Mean attention weight from the readout position to position 0 (the first-shortcut circuit)."""
    return patterns[..., 0].double().mean(0)


def label_directions(model: nn.Module) -> Float[Tensor, "n_classes d_model"]:
    """Per-class residual directions: what raises class c's logit relative to the others.

    ``d_c = U[:, c] - mean_c' U[:, c']`` with ``U = W_U`` after folding ``ln_final``'s weight in
    and centring over ``d_model`` (module docstring). For two classes ``d_1 = -d_0 =
    (W_U[:, 1] - W_U[:, 0]) / 2``, the label-contrast direction.
    """
    unembed = model.W_U.detach().double()
    ln_w = getattr(model.ln_final, "w", None)
    if ln_w is not None:
        unembed = ln_w.detach().double()[:, None] * unembed
        unembed = unembed - unembed.mean(0, keepdim=True)
    return (unembed - unembed.mean(1, keepdim=True)).T


@torch.no_grad()
def ov_projections(
    model: nn.Module, readout_token: int | None = None, n_pos: int | None = None
) -> Float[Tensor, "n_layers n_heads key_pos n_values n_classes"]:
    """What each head writes for each (position, value) key, projected on `label_directions`.

    A head's write for a key is ``(ln1(x) @ W_V + b_V) @ W_O`` with ``x`` the key's direct-path
    input (exact at layer 0). ``b_O`` is left out: it is shared by the heads and the same for
    every token, so it changes no rank.

    Returns:
        Projections, shape [n_layers, n_heads, n_pos - 1, V, n_classes].
    """
    readout_token, n_pos, values = readout_layout(model, readout_token, n_pos)
    directions = label_directions(model)
    out = []
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        _, keys = _direct_inputs(model, layer, values, readout_token, n_pos)
        v = torch.einsum("pvd,hde->hpve", keys, attn.W_V) + attn.b_V[:, None, None, :]
        write = torch.einsum("hpve,hed->hpvd", v, attn.W_O).double()
        out.append(torch.einsum("hpvd,cd->hpvc", write, directions))
    return torch.stack(out)


def ov_parity_rho(
    model: nn.Module, m: int | None = None, readout_token: int | None = None, n_pos: int | None = None
) -> tuple[
    Float[Tensor, "n_layers n_heads"],
    Int[Tensor, "n_layers n_heads"],
    Float[Tensor, "n_layers n_heads key_pos"],
]:
    """How strongly what a head writes separates tokens by ``value mod m`` (the true rule's ingredient).

    For a shift ``k`` in ``0..m-1``, ``R_k = mean over classes c of rank_biserial(write . d_{(c+k)
    mod m}, value mod m == c)`` (`label_directions`, `interp.dissect.rank_stats.rank_biserial`), pooled over
    key positions and values; the result is ``max_k R_k`` and its argmax. Why this form:

    * The rank-biserial correlation is Spearman's rho for a two-valued variable rescaled so that
      perfect separation is exactly 1; plain Spearman against a parity bit tops out near 0.87.
    * For m = 2 it reduces to the study's definition: ``R_0 = rank_biserial(write . (W_U[:, 1] -
      W_U[:, 0]), value odd)``, ``R_1 = -R_0``, so the result is ``|rho|`` and the shift is its sign.
    * For m = 3 a head that writes "residue c" for tokens of residue c scores 1 at shift 0; one
      that writes a cyclically shifted residue (as an addend of a sum mod m may) scores 1 at its
      shift. A head blind to residues scores about 0 at every shift.

    Args:
        model: A hooked transformer.
        m: The label modulus; default ``d_vocab_out`` (MPSP: m classes).
        readout_token: See `readout_layout`.
        n_pos: See `readout_layout`.

    Returns:
        ``(rho, shift, per_position)``: rho in [-1, 1] and the best shift, shape [n_layers,
        n_heads]; and ``R`` at that shift for each key position, [n_layers, n_heads, n_pos - 1].
    """
    m = model.cfg.d_vocab_out if m is None else int(m)
    _, _, values = readout_layout(model, readout_token, n_pos)
    proj = ov_projections(model, readout_token, n_pos)[..., :m]  # [L, H, P, V, m]
    residue = values % m
    shifts = torch.arange(m)
    pooled, per_pos = [], []
    for c in range(m):
        # Class c's residue against each shifted direction (c + k) mod m: [..., k].
        toward = proj[..., (c + shifts) % m].movedim(-1, 0)  # [m(shift), L, H, P, V]
        positive = residue == c
        pooled.append(rank_biserial(toward.flatten(-2), positive.repeat(proj.shape[2])))
        per_pos.append(rank_biserial(toward, positive))
    pooled_k = torch.stack(pooled).mean(0)  # [m(shift), L, H]
    rho, shift = pooled_k.max(0)
    per_pos_k = torch.stack(per_pos).mean(0)  # [m(shift), L, H, P]
    return rho, shift, per_pos_k.gather(0, shift[None, ..., None].expand(1, *per_pos_k.shape[1:]))[0]
