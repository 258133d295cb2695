"""A fast training forward pass for `models.transformer.Transformer`: logits at the readout.

`fast_readout(model, tokens)` returns `model(tokens)[:, -1]` (the logits at the last position,
where every task reads its label), differentiable with respect to every parameter, equal to
the hooked forward pass to 1e-5 in fp32 (`tests/unit/models/test_fast_forward.py` proves it on
every kind of config). It is for training only: **it runs no hooks** (no `HookPoint` is called,
so `run_with_hooks` / `hooks()` have no effect on it); analyses use the hooked forward.

It is fast because it does only the work a last-position loss needs, and uses exact algebra:

* **Layer 0 works on tables.** Its residual input, `ln1`, queries, keys and values depend only
  on (position, token), so they are computed once per call for all `n_ctx * d_vocab` pairs
  (390 rows for the MPSP presets) from the current weights, differentiably, and gathered. So
  are the attention scores (a `[pos*vocab, pos*vocab, heads]` table of `q . k / sqrt(d_head)`,
  causal mask included) and the value vectors already multiplied by `W_O` (per head). Layer 0's
  attention is then gathers, a softmax and one tiny batched matmul: no per-example Q/K/V/O
  matmul. The gathers' backward is a `scatter_add_` (much faster on CPU than the
  `index_put_(accumulate=True)` torch uses for indexing). A 1-layer model reads the attention
  at the last position only; with `fused_mix=True` (fp32, not under `vmap`) its mix of the
  `W_O`-multiplied values is one `embedding_bag` (a weighted sum of table rows) instead of a
  gather and a batch of one-row matmuls, which were the largest cost of study B's WLMD step
  after the MLP (`benchmarks/wlmd_step.py`).
* **The last layer works at the readout position only.** Only its query, attention row, MLP,
  `ln_final` and unembedding at the last position matter. Its keys and values are never
  formed: `score[p] = (W_K q) . ln1(x_p) + q . b_K` and, since the attention pattern sums to 1,
  `attn_out = sum_h (sum_p pattern_h[p] ln1(x_p)) (W_V W_O)_h + b_V W_O + b_O`.
* Earlier layers (those of 3+ layer models between the first and the last) run in full, with
  one fused QKV matmul.

So a 1-layer model is gathers plus attention at one query position; a 2-layer model adds
layer 0's MLP at every position (its bulk) and two small batched matmuls.

**Mixed precision.** Under `torch.autocast(device_type, dtype=torch.bfloat16)` the large
matmuls and the gathered tables that feed them run in bfloat16; the tables themselves, the
attention scores and softmax, the residual stream, LayerNorms and the logits stay in fp32, and
the gathers accumulate their gradients in fp32. (The autocast region is honoured by hand: the
function disables autocast inside and casts explicitly.)

`compiled_fast_readout(model)` wraps it in `torch.compile`; see `benchmarks/train_step.py` for
whether that pays on a given machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

__all__ = ["compiled_fast_readout", "fast_readout", "keep_freed_memory"]


class _Gather(torch.autograd.Function):
    """`table[index]` (rows), optionally cast to `dtype`; backward by `scatter_add` in fp32.

    Written in the `torch.func` style (`setup_context`, generated vmap rule) so that
    `interp.training.vectorized` can `vmap` the whole forward over stacked seeds.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(table: Tensor, index: Tensor, dtype: torch.dtype) -> Tensor:  # type: ignore[override]
        src = table if table.dtype == dtype else table.to(dtype)
        return src.index_select(0, index.reshape(-1)).view(*index.shape, table.shape[1])

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor, Tensor, torch.dtype], output: Tensor) -> None:  # type: ignore[override]
        table, index, _ = inputs
        ctx.save_for_backward(index)
        ctx.table_shape = table.shape
        ctx.table_dtype = table.dtype

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (index,) = ctx.saved_tensors
        rows, cols = ctx.table_shape
        acc = torch.promote_types(ctx.table_dtype, torch.float32)  # never accumulate in bf16
        grad = grad.reshape(-1, cols).to(acc)
        # Out of place: under vmap `grad` is batched while a fresh zeros tensor is not.
        out = torch.zeros(rows, cols, dtype=acc, device=grad.device)
        out = out.scatter_add(0, index.reshape(-1, 1).expand(-1, cols), grad)
        return out.to(ctx.table_dtype), None, None


def _gather(table: Tensor, index: Tensor, dtype: torch.dtype) -> Tensor:
    return _Gather.apply(table, index, dtype)


def _ln(module: nn.Module, x: Tensor) -> Tensor:
    """Our `LayerNorm` ((x - mean) / sqrt(var + eps) * w + b) via the fused kernel, or identity."""
    if isinstance(module, nn.Identity):
        return x
    return F.layer_norm(x, (x.shape[-1],), module.w, module.b, module.eps)


def _heads_to_matrix(W: Tensor) -> Tensor:
    """`[heads, d_model, d_head]` -> `[d_model, heads * d_head]` (heads side by side)."""
    h, d, e = W.shape
    return W.permute(1, 0, 2).reshape(d, h * e)


def _mlp(block: nn.Module, resid: Tensor, cdt: torch.dtype) -> Tensor:
    """`resid + mlp(ln2(resid))` on a `[rows, d_model]` residual."""
    mlp = block.mlp
    x = _ln(block.ln2, resid)
    if cdt == mlp.W_in.dtype:
        pre = torch.addmm(mlp.b_in, x, mlp.W_in)
        post = F.relu_(pre) if mlp.act_fn is F.relu else mlp.act_fn(pre)
        return torch.addmm(mlp.b_out, post, mlp.W_out) + resid
    pre = torch.addmm(mlp.b_in.to(cdt), x.to(cdt), mlp.W_in.to(cdt))
    post = F.relu_(pre) if mlp.act_fn is F.relu else mlp.act_fn(pre)
    return resid + torch.addmm(mlp.b_out.to(cdt), post, mlp.W_out.to(cdt))


def _layer0(
    model: nn.Module, tokens: Tensor, cdt: torch.dtype, only_last: bool, fused_mix: bool = False
) -> Tensor:
    """Layer 0's attention block from tables: resid_mid at every position `[batch, pos,
    d_model]`, or at the last position only `[batch, d_model]` when `only_last`.
    """
    cfg = model.cfg
    batch, n_pos = tokens.shape
    V, D, H, dh = cfg.d_vocab, cfg.d_model, cfg.n_heads, cfg.d_head
    PV = n_pos * V
    block = model.blocks[0]
    attn = block.attn
    dev = tokens.device

    # Tables over (position, token): row p * V + t.
    W_E = model.embed.W_E
    if cfg.positional_embedding_type == "standard":
        X = (W_E.unsqueeze(0) + model.pos_embed.W_pos[:n_pos].unsqueeze(1)).reshape(PV, D)
    else:
        X = W_E.repeat(n_pos, 1)
    xn = _ln(block.ln1, X)
    q_rows = xn[(n_pos - 1) * V :] if only_last else xn
    q = torch.addmm(attn.b_Q.reshape(-1), q_rows, _heads_to_matrix(attn.W_Q))
    k = torch.addmm(attn.b_K.reshape(-1), xn, _heads_to_matrix(attn.W_K))
    v = torch.addmm(attn.b_V.reshape(-1), xn, _heads_to_matrix(attn.W_V))
    n_q = q.shape[0]
    scores = (
        torch.bmm(q.view(n_q, H, dh).transpose(0, 1), k.view(PV, H, dh).permute(1, 2, 0)) / attn.attn_scale
    )
    if cfg.attention_dir == "causal" and not only_last:
        pos = torch.arange(PV, device=dev) // V
        scores = scores.masked_fill(pos[None, :, None] < pos[None, None, :], float("-inf"))
    score_table = scores.permute(1, 2, 0).reshape(-1, 1)  # row (q_row * PV + k_row) * H + h
    ov_table = torch.bmm(v.view(PV, H, dh).transpose(0, 1), attn.W_O).transpose(0, 1).reshape(PV, H * D)
    resid_table = X + attn.b_O

    idx = tokens + torch.arange(n_pos, device=dev) * V  # [batch, pos] table rows
    heads = torch.arange(H, device=dev)
    if only_last:
        rows = ((tokens[:, -1:] * PV + idx) * H).unsqueeze(-1) + heads  # [batch, key, head]
        pattern = F.softmax(_gather(score_table, rows, X.dtype).view(batch, n_pos, H), dim=1)
        if fused_mix and cdt == X.dtype:
            # sum_(p, h) pattern[p, h] * ov_table[(idx_p, h)] in one fused kernel: no
            # [batch, pos * heads, d_model] gather and no batch of 1-row matmuls (3x faster
            # forward + backward on CPU). Opt-in: vmap has no batching rule for it (vectorised
            # training), and its summation order differs from the default path's in the last
            # bits, which AdamW amplifies, so the default keeps training runs as they were.
            bag = ((idx * H).unsqueeze(-1) + heads).view(batch, n_pos * H)  # rows (pv * H + h)
            out = F.embedding_bag(
                bag, ov_table.view(PV * H, D), per_sample_weights=pattern.view(batch, n_pos * H), mode="sum"
            )
        else:
            ov = _gather(ov_table, idx, cdt).view(batch, n_pos * H, D)  # [batch, (key pos, head), d_model]
            out = torch.bmm(pattern.view(batch, 1, n_pos * H).to(cdt), ov).view(batch, D)
        return _gather(resid_table, idx[:, -1], X.dtype) + out
    ov = _gather(ov_table, idx, cdt).view(batch, n_pos * H, D)  # [batch, (key pos, head), d_model]
    rows = ((idx.unsqueeze(2) * PV + idx.unsqueeze(1)) * H).unsqueeze(-1) + heads  # [batch, q, k, head]
    pattern = F.softmax(_gather(score_table, rows, X.dtype).view(batch, n_pos, n_pos, H), dim=2)
    resid = _gather(resid_table, idx, X.dtype)
    if cdt == X.dtype:
        return torch.baddbmm(resid, pattern.view(batch, n_pos, n_pos * H), ov)
    return resid + torch.bmm(pattern.view(batch, n_pos, n_pos * H).to(cdt), ov)


def _full_block(block: nn.Module, resid: Tensor, causal: bool, cdt: torch.dtype) -> Tensor:
    """A whole block at every position (middle layers of 3+ layer models)."""
    attn = block.attn
    batch, n_pos, D = resid.shape
    H, _, dh = attn.W_Q.shape
    x = _ln(block.ln1, resid).reshape(batch * n_pos, D)
    W = torch.cat([_heads_to_matrix(attn.W_Q), _heads_to_matrix(attn.W_K), _heads_to_matrix(attn.W_V)], 1)
    b = torch.cat([attn.b_Q.reshape(-1), attn.b_K.reshape(-1), attn.b_V.reshape(-1)])
    qkv = torch.addmm(b.to(cdt), x.to(cdt), W.to(cdt)).view(batch, n_pos, 3, H, dh).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]  # [batch, head, pos, d_head]
    scores = (q @ k.transpose(-1, -2)).to(resid.dtype) / attn.attn_scale
    if causal:
        allowed = torch.ones(n_pos, n_pos, dtype=torch.bool, device=resid.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    z = (F.softmax(scores, dim=-1).to(cdt) @ v).transpose(1, 2).reshape(batch * n_pos, H * dh)
    attn_out = torch.addmm(attn.b_O.to(cdt), z, attn.W_O.reshape(H * dh, D).to(cdt))
    resid_mid = resid.reshape(batch * n_pos, D) + attn_out
    return _mlp(block, resid_mid, cdt).view(batch, n_pos, D)


def _last_attention(block: nn.Module, resid: Tensor, cdt: torch.dtype) -> Tensor:
    """The last layer's resid_mid at the last position, `[batch, d_model]`, without keys or values.

    The last query sees every key (causal or not). With `x = ln1(resid)`:
    `score_h[p] = (x_p . (W_K,h q_h) + q_h . b_K,h) / sqrt(d_head)` and, as each pattern row sums
    to 1, `attn_out = sum_h (sum_p pattern_h[p] x_p) W_V,h W_O,h + sum_h b_V,h W_O,h + b_O`.
    """
    attn = block.attn
    batch, n_pos, D = resid.shape
    H, _, dh = attn.W_Q.shape
    x = _ln(block.ln1, resid)
    xc = x if cdt == x.dtype else x.to(cdt)
    q = torch.addmm(attn.b_Q.reshape(-1), x[:, -1], _heads_to_matrix(attn.W_Q)) / attn.attn_scale
    qk = q @ torch.block_diag(*attn.W_K.transpose(1, 2))  # [batch, H * D]: W_K,h q_h side by side
    q_bias = (q.view(batch, H, dh) * attn.b_K).sum(-1)  # [batch, H]
    scores = torch.bmm(xc, qk.view(batch, H, D).transpose(1, 2).to(cdt)).to(q.dtype) + q_bias.unsqueeze(1)
    pattern = F.softmax(scores, dim=1)  # [batch, key pos, head]
    mixed = torch.bmm(pattern.transpose(1, 2).to(cdt), xc)  # [batch, H, D]
    ov = torch.bmm(attn.W_V, attn.W_O).reshape(H * D, D)
    const = attn.b_V.reshape(-1) @ attn.W_O.reshape(H * dh, D) + attn.b_O
    return resid[:, -1] + torch.addmm(const.to(cdt), mixed.view(batch, H * D), ov.to(cdt))


def fast_readout(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], *, fused_mix: bool = False
) -> Float[Tensor, "batch d_vocab_out"]:
    """Return `model(tokens)[:, -1]` of a `Transformer`, without hooks, fast.

    Differentiable with respect to every parameter; equal to the hooked forward pass to 1e-5 in
    fp32. Honours an enclosing `torch.autocast` (bfloat16 for the large matmuls); the logits are
    in the parameters' dtype either way. Hooks are not run: use it for training, and the hooked
    forward for analyses.

    Args:
        model: A `models.transformer.Transformer`.
        tokens: Token ids `[batch, pos]`, `pos <= n_ctx`.
        fused_mix: 1-layer models in fp32: mix the attention values with one `embedding_bag`
            (about 3x faster on CPU; not under `vmap`). Study B's WLMD uses it.
    """
    if fused_mix:
        return _call(lambda m, t, cdt: _fast_readout(m, t, cdt, fused_mix=True), model, tokens)
    return _call(_fast_readout, model, tokens)


def _call(
    forward: Callable[[nn.Module, Tensor, torch.dtype], Tensor], model: nn.Module, tokens: Tensor
) -> Tensor:
    """Run `forward(model, tokens, compute dtype)` with an enclosing autocast honoured by hand:
    the compute dtype is autocast's if it is on (else the weights'), and autocast is off inside.
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape [batch, pos], got {tuple(tokens.shape)}")
    device_type = tokens.device.type
    cdt = (
        torch.get_autocast_dtype(device_type)
        if torch.is_autocast_enabled(device_type)
        else model.embed.W_E.dtype
    )
    with torch.autocast(device_type, enabled=False):
        return forward(model, tokens, cdt)


def _fast_readout(model: nn.Module, tokens: Tensor, cdt: torch.dtype, fused_mix: bool = False) -> Tensor:
    cfg = model.cfg
    n_layers = cfg.n_layers
    causal = cfg.attention_dir == "causal"
    if n_layers == 1:
        resid = _layer0(model, tokens, cdt, only_last=True, fused_mix=fused_mix)
    else:
        batch, n_pos = tokens.shape
        resid = _layer0(model, tokens, cdt, only_last=False).view(batch * n_pos, cfg.d_model)
        resid = _mlp(model.blocks[0], resid, cdt).view(batch, n_pos, cfg.d_model)
        for block in model.blocks[1:-1]:
            resid = _full_block(block, resid, causal, cdt)
        resid = _last_attention(model.blocks[-1], resid, cdt)
    resid = _mlp(model.blocks[-1], resid, cdt).to(model.unembed.W_U.dtype)
    unembed = model.unembed
    return torch.addmm(unembed.b_U, _ln(model.ln_final, resid), unembed.W_U)


def compiled_fast_readout(model: nn.Module, **compile_kwargs) -> Callable[[Tensor], Tensor]:
    """Return `tokens -> fast_readout(model, tokens)` compiled with `torch.compile`.

    The first calls compile (tens of seconds on CPU; again for each new batch shape or autocast
    state). Whether it pays depends on the machine: `benchmarks/train_step.py` measures it.
    """
    compiled = torch.compile(_fast_readout, **compile_kwargs)
    return lambda tokens: _call(compiled, model, tokens)


def keep_freed_memory() -> bool:
    """Make glibc malloc keep freed memory instead of returning it to the OS (process-wide).

    Training steps allocate and free the same large activation buffers every step. glibc serves
    blocks over its mmap threshold (at most 32 MiB) with fresh `mmap`s, so every step pays page
    faults on tens of MB. This sets `M_MMAP_MAX = 0` (no mmap'd blocks) and a huge
    `M_TRIM_THRESHOLD` (never trim the heap), so buffers are reused: the effect tcmalloc or
    jemalloc would give, with no dependency. Returns False where glibc's `mallopt` is absent.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**30))
