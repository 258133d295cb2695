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
  attention is then gathers, a softmax and one tiny batched matmul (`_Mix`, written by hand,
  as autograd's gather-then-bmm backward costs three extra passes): no per-example Q/K/V/O
  matmul. On CPU in fp32 the gathers' backward and the mix are CSR products whose index sort
  is computed once per token batch (`models.csr`: no per-step sort, no gathered
  `[batch, pos * heads, d_model]` rows); elsewhere (bf16 tables, GPU, under `torch.func` or
  `torch.compile`) the gathers' backward is an fp32 `index_add` (much faster on CPU than the
  `index_put_(accumulate=True)` torch uses for indexing) and the mix a batched matmul.
* **Leading positions of a 2-layer causal model work on prefix tables.** Under causal
  attention layer 0's output at position p depends on tokens 0..p only, so for the positions
  whose `V**(p+1)` prefixes are well below the batch (MPSP at 16,384: positions 0 and 1,
  4,225 prefixes) layer 0, its MLP and the last layer's `ln1` run once per prefix and are
  gathered: layer 0's MLP, the step's bulk, runs on 4 x 16,384 + 8,450 rows instead of
  6 x 16,384.
* **The last layer works at the readout position only.** Only its query, attention row, MLP,
  `ln_final` and unembedding at the last position matter. Its keys and values are never
  formed: `score[p] = (W_K q) . ln1(x_p) + q . b_K` and, since the attention pattern sums to 1,
  `attn_out = sum_h (sum_p pattern_h[p] ln1(x_p)) (W_V W_O)_h + b_V W_O + b_O`.
* Earlier layers (those of 3+ layer models between the first and the last) run in full, with
  one fused QKV matmul.

So a 1-layer model is gathers plus attention at one query position (an `embedding_bag`); a
2-layer model adds layer 0's MLP at the positions after the prefix tables (its bulk) and two
small batched matmuls.

**Mixed precision.** Under `torch.autocast(device_type, dtype=torch.bfloat16)` the large
matmuls and the gathered tables that feed them run in bfloat16; the tables themselves, the
attention scores and softmax, the residual stream, LayerNorms, the last layer's two tiny
per-example products and the logits stay in fp32, and the gathers accumulate their gradients
in fp32. (The autocast region is honoured by hand: the
function disables autocast inside and casts explicitly.)

`compiled_fast_readout(model)` wraps it in `torch.compile`; see `benchmarks/train_step.py` for
whether that pays on a given machine.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from models import csr
from models.config import TransformerConfig

__all__ = ["compiled_fast_readout", "fast_readout", "prefix_len"]


class _Gather(torch.autograd.Function):
    """`table[index]` (rows), optionally cast to `dtype`; backward in fp32.

    The backward is a CSR product with the index's cached sort (`models.csr`) when `plan` is
    given and it applies (CPU, fp32, outside `torch.func`), else an `index_add`. Written in the
    `torch.func` style (`setup_context`, generated vmap rule) so that
    `interp.training.vectorized` can `vmap` the whole forward over stacked seeds.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(table: Tensor, index: Tensor, dtype: torch.dtype, plan: csr.IndexPlan | None) -> Tensor:  # type: ignore[override]
        src = table if table.dtype == dtype else table.to(dtype)
        return src.index_select(0, index.reshape(-1)).view(*index.shape, table.shape[1])

    @staticmethod
    def setup_context(ctx, inputs, output: Tensor) -> None:  # type: ignore[override]
        table, index, _, plan = inputs
        ctx.save_for_backward(index)
        ctx.table_shape = table.shape
        ctx.table_dtype = table.dtype
        ctx.plan = plan

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (index,) = ctx.saved_tensors
        rows, cols = ctx.table_shape
        acc = torch.promote_types(ctx.table_dtype, torch.float32)  # never accumulate in bf16
        # Contiguous rows: a strided gradient (e.g. a slice of `torch.cat`'s) makes the
        # accumulation several times slower.
        grad = grad.reshape(-1, cols).to(acc).contiguous()
        if ctx.plan is not None and csr.enabled(grad):
            return csr.gather_backward(ctx.plan, grad).to(ctx.table_dtype), None, None, None
        # Out of place: under vmap `grad` is batched while a fresh zeros tensor is not.
        out = torch.zeros(rows, cols, dtype=acc, device=grad.device).index_add(0, index.reshape(-1), grad)
        return out.to(ctx.table_dtype), None, None, None


def _gather(table: Tensor, index: Tensor, dtype: torch.dtype, plan: csr.IndexPlan | None = None) -> Tensor:
    return _Gather.apply(table, index, dtype, plan)


class _Mix(torch.autograd.Function):
    """Layer 0's attention output from the `ov` table: `resid + pattern @ ov_table[idx]`.

    `table [pos * vocab, heads * d_model]`, `idx [batch, pos]` (table rows of the keys),
    `pattern [batch, S, pos * heads]` (columns (key, head)), `resid [batch, S, d_model]`;
    returns `[batch, S, d_model]` in `resid`'s dtype. On the dense path the products run in
    `cdt` and the table's gradient is accumulated in fp32 by `index_add`.

    Written by hand because autograd's version of gather-then-bmm is slow on CPU: its
    gradient of the gathered rows arrives transposed, so it is copied, cast and scattered in
    three passes over a `[batch * pos, heads * d_model]` tensor. Here the products are laid
    out contiguously. With `plan` (the CSR form of the keys' table rows, `models.csr`) on
    CPU in fp32 outside `torch.func`, several query positions (the 2-layer models) never
    gather the rows: the mix is a CSR matrix (the pattern) times the table, its gradients a
    sampled product and the transposed CSR matrix times the output gradient, in fp32. A
    single query position (`S == 1`, the 1-layer models) uses
    `embedding_bag` (gather and weighted sum in one pass, ~8x faster than the bmm of 1-row
    matrices) and outer products. `embedding_bag` has no vmap batching rule: under
    `torch.func.vmap` (vectorised seeds) torch loops over the seeds for it, which keeps each
    seed's arithmetic that of its own run.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(
        table: Tensor,
        idx: Tensor,
        pattern: Tensor,
        resid: Tensor,  # type: ignore[override]
        cdt: torch.dtype,
        plan: csr.IndexPlan | None,
    ) -> Tensor:
        batch, S, D = resid.shape
        if _sparse(plan, S, table, pattern, resid):
            out = csr.mix(plan, pattern.reshape(batch * S, -1), table.view(-1, D), resid.reshape(-1, D))
            return out.view(batch, S, D)
        if S == 1:
            heads = pattern.shape[-1] // idx.shape[1]
            rows = (idx.unsqueeze(-1) * heads + torch.arange(heads, device=idx.device)).view(batch, -1)
            with warnings.catch_warnings():  # vmap's "performance drop" notice: the loop is intended
                warnings.filterwarnings("ignore", message="There is a performance drop")
                mixed = F.embedding_bag(
                    rows, table.view(-1, D), per_sample_weights=pattern.view(batch, -1), mode="sum"
                )
            return resid + mixed.view(batch, 1, D).to(resid.dtype)
        ov = _rows(table, idx, cdt, D)
        if cdt == resid.dtype:
            return torch.baddbmm(resid, pattern, ov)
        return resid + torch.bmm(pattern.to(cdt), ov)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[override]
        table, idx, pattern, resid, cdt, plan = inputs
        ctx.save_for_backward(table, idx, pattern)
        ctx.cdt = cdt
        ctx.plan = plan if _sparse(plan, resid.shape[1], table, pattern, resid) else None

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        table, idx, pattern = ctx.saved_tensors
        batch, S, D = grad.shape
        if ctx.plan is not None and csr.enabled(grad):
            g = grad.reshape(batch * S, D).contiguous()
            grad_table, grad_pattern = csr.mix_backward(
                ctx.plan, pattern.reshape(batch * S, -1), table.view(-1, D), g
            )
            return grad_table.view(table.shape), None, grad_pattern.view(pattern.shape), grad, None, None
        if S == 1:  # outer products and row dots: no matmul of 1-row matrices
            ov = _rows(table, idx, table.dtype, D)  # [batch, J, D]
            g = grad.view(batch, 1, D)
            grad_pattern = (ov * g).sum(-1).view(batch, 1, -1)
            inner = pattern.view(batch, -1, 1) * g  # [batch, J, D]
        else:
            cdt = ctx.cdt
            ov, g = _rows(table, idx, cdt, D), grad.to(cdt)
            grad_pattern = torch.bmm(g, ov.transpose(1, 2)).to(pattern.dtype)
            inner = torch.bmm(pattern.to(cdt).transpose(1, 2).contiguous(), g)  # [batch, J, D]
        acc = torch.promote_types(table.dtype, torch.float32)  # never accumulate in bf16
        src = inner.reshape(-1, table.shape[1]).to(acc)
        # Out of place: under vmap `src` is batched while a fresh zeros tensor is not.
        grad_table = torch.zeros(table.shape, dtype=acc, device=table.device)
        grad_table = grad_table.index_add(0, idx.reshape(-1), src)
        return grad_table.to(table.dtype), None, grad_pattern, grad, None, None


def _sparse(plan: csr.IndexPlan | None, S: int, *tensors: Tensor) -> bool:
    """Whether `_Mix` takes its CSR path (several query positions: the 1-layer one has its own)."""
    return plan is not None and S > 1 and csr.enabled(*tensors)


def _rows(table: Tensor, idx: Tensor, dtype: torch.dtype, d: int) -> Tensor:
    """`table[idx]` in `dtype`, viewed as `[batch, pos * heads, d]`."""
    src = table if table.dtype == dtype else table.to(dtype)
    return src.index_select(0, idx.reshape(-1)).view(idx.shape[0], -1, d)


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
    model: nn.Module, tokens: Tensor, cdt: torch.dtype, first: int, with_plans: bool = True
) -> Tensor:
    """Layer 0's attention block from tables: resid_mid `[batch, pos - first, d_model]` at the
    query positions `first..pos-1` (keys at every position); `with_plans`: CSR plans (`_indices`).
    """
    cfg = model.cfg
    batch, n_pos = tokens.shape
    V, D, H, dh = cfg.d_vocab, cfg.d_model, cfg.n_heads, cfg.d_head
    PV, S = n_pos * V, n_pos - first
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
    q = torch.addmm(attn.b_Q.reshape(-1), xn[first * V :], _heads_to_matrix(attn.W_Q))
    k = torch.addmm(attn.b_K.reshape(-1), xn, _heads_to_matrix(attn.W_K))
    v = torch.addmm(attn.b_V.reshape(-1), xn, _heads_to_matrix(attn.W_V))
    n_q = q.shape[0]
    scores = torch.bmm(q.view(n_q, H, dh).transpose(0, 1), k.view(PV, H, dh).permute(1, 2, 0))
    scores = scores / attn.attn_scale
    if cfg.attention_dir == "causal" and S > 1:  # (the last query sees every key)
        q_pos = torch.arange(n_q, device=dev) // V + first
        k_pos = torch.arange(PV, device=dev) // V
        scores = scores.masked_fill(k_pos[None, None, :] > q_pos[None, :, None], float("-inf"))
    score_table = scores.permute(1, 2, 0).reshape(-1, 1)  # row (q_row * PV + k_row) * H + h
    ov_table = torch.bmm(v.view(PV, H, dh).transpose(0, 1), attn.W_O).transpose(0, 1).reshape(PV, H * D)
    resid_table = X + attn.b_O

    idx, rows, plans = _indices(tokens, first, V, H, with_plans)
    pattern = F.softmax(_gather(score_table, rows, X.dtype, plans[0]).view(batch, S, n_pos, H), dim=2)
    resid = _gather(resid_table, idx[:, first:], X.dtype, plans[1])
    return _Mix.apply(ov_table, idx, pattern.view(batch, S, n_pos * H), resid, cdt, plans[2])


def _indices(
    tokens: Tensor, first: int, V: int, H: int, with_plans: bool = True
) -> tuple[Tensor, Tensor, tuple]:
    """Layer 0's table rows of `tokens`, and their CSR plans (`models.csr`; cached per batch).

    Returns `idx [batch, pos]` (rows of the (position, token) tables), `rows [batch, S, key,
    head]` (rows of the score table) and the plans of the score gather, the residual gather
    and the mix (`None`s where the CSR path cannot run: under `torch.compile`; or not wanted,
    `with_plans` False: a batch used once, where their sort costs more than it saves).
    """

    def build() -> tuple[Tensor, Tensor, tuple]:
        n_pos, dev = tokens.shape[1], tokens.device
        PV = n_pos * V
        idx = tokens + torch.arange(n_pos, device=dev) * V
        q_idx = idx[:, first:] - first * V  # [batch, S] query rows
        heads = torch.arange(H, device=dev)
        rows = ((q_idx.unsqueeze(2) * PV + idx.unsqueeze(1)) * H).unsqueeze(-1) + heads
        if torch.compiler.is_compiling() or not with_plans:
            return idx, rows, (None, None, None)
        keys = (idx.unsqueeze(-1) * H + heads).view(len(idx), 1, -1).expand(-1, n_pos - first, -1)
        plans = (
            csr.IndexPlan(rows, (n_pos - first) * V * PV * H),
            csr.IndexPlan(idx[:, first:], PV),
            csr.IndexPlan(keys, PV * H),
        )
        return idx, rows, plans

    if torch.compiler.is_compiling() or not with_plans:
        return build()
    return csr.cached_plan(tokens, f"layer0 {first} {V} {H}", build)


def prefix_len(cfg: TransformerConfig, batch: int, n_pos: int, per_prefix: int = 2) -> int:
    """How many leading positions a 2-layer causal model computes as tables over every token prefix.

    Public because what the training step must compute depends on it (`benchmarks/train_step.py`
    counts the step's minimal FLOPs with it).

    Under causal attention the residual stream at position p depends on tokens 0..p only, so
    for the `V**n` prefixes of length n it can be computed once per call instead of once per
    example: it pays while `V**n` is well below the batch (the MPSP presets at batch 16,384:
    positions 0 and 1, i.e. 4,225 prefixes instead of 2 x 16,384 rows of layer 0 and its MLP).
    The last position always stays per example. `per_prefix`: the examples a prefix table row
    must stand for (2: full-batch training's tuning; a one-off minibatch asks for more, as its
    tables are a second layer-0 pass that its few rows do not repay).
    """
    if cfg.attention_dir != "causal" or cfg.n_layers != 2:
        return 0
    n = 0
    while n + 1 < n_pos and per_prefix * cfg.d_vocab ** (n + 1) <= batch:
        n += 1
    return n


def _prefix_keys(
    model: nn.Module, tokens: Tensor, cdt: torch.dtype, n: int, with_plans: bool = True
) -> Tensor:
    """`ln1` of the last block on layer 0's output at positions `0..n-1`, `[batch, n, d_model]`,
    computed on the table of all `V**n` prefixes and gathered (see `prefix_len`).
    """
    V, D = model.cfg.d_vocab, model.cfg.d_model
    prefixes, row = _prefixes(tokens, V, n, with_plans)
    resid = _mlp(model.blocks[0], _layer0(model, prefixes, cdt, 0).reshape(-1, D), cdt)
    table = _ln(model.blocks[-1].ln1, resid).view(V**n, n * D)
    return _gather(table, row.index, table.dtype, row if with_plans else None).view(len(tokens), n, D)


@functools.lru_cache(maxsize=8)
def _all_prefixes(V: int, n: int, device: torch.device) -> Tensor:
    """Every token prefix of length `n`, `[V**n, n]`, in table-row order (one tensor per shape,
    so that `models.csr` caches its layer-0 plans across calls).
    """
    weights = V ** torch.arange(n - 1, -1, -1, device=device)
    return torch.arange(V**n, device=device).unsqueeze(1) // weights % V


def _prefixes(tokens: Tensor, V: int, n: int, with_plans: bool = True) -> tuple[Tensor, csr.IndexPlan]:
    """All prefixes `[V**n, n]` and the plan of each example's prefix row `[batch]`."""
    weights = V ** torch.arange(n - 1, -1, -1, device=tokens.device)  # prefix -> its table row

    def build() -> csr.IndexPlan:
        return csr.IndexPlan((tokens[:, :n] * weights).sum(1), V**n)

    if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
        return torch.arange(V**n, device=tokens.device).unsqueeze(1) // weights % V, build()
    if not with_plans:  # nothing cached for a batch used once
        return _all_prefixes(V, n, tokens.device), build()
    return _all_prefixes(V, n, tokens.device), csr.cached_plan(tokens, f"prefix {V} {n}", build)


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


def _last_attention(block: nn.Module, x: Tensor, resid_last: Tensor, cdt: torch.dtype) -> Tensor:
    """The last layer's resid_mid at the last position, `[batch, d_model]`, without keys or values.

    `x = ln1(resid) [batch, pos, d_model]` at every position, `resid_last [batch, d_model]`.
    The last query sees every key (causal or not):
    `score_h[p] = (x_p . (W_K,h q_h) + q_h . b_K,h) / sqrt(d_head)` and, as each pattern row sums
    to 1, `attn_out = sum_h (sum_p pattern_h[p] x_p) W_V,h W_O,h + sum_h b_V,h W_O,h + b_O`.
    The two batched products over positions are tiny (`heads` columns): they stay in fp32, as
    casting `x` to bf16 and its gradient back would cost more than they do.
    """
    attn = block.attn
    batch, _, D = x.shape
    H, _, dh = attn.W_Q.shape
    # The query from its own ln1 (a [batch, d_model] recomputation): selecting x[:, -1] would
    # cost a zero-filled [batch, pos, d_model] gradient.
    x_last = _ln(block.ln1, resid_last)
    q = torch.addmm(attn.b_Q.reshape(-1), x_last, _heads_to_matrix(attn.W_Q)) / attn.attn_scale
    # W_K,h q_h per head: [H, batch, D] (a block-diagonal matmul would do H times the work)
    qk = torch.bmm(q.view(batch, H, dh).transpose(0, 1), attn.W_K.transpose(1, 2))
    q_bias = (q.view(batch, H, dh) * attn.b_K).sum(-1)  # [batch, H]
    scores = torch.baddbmm(q_bias.unsqueeze(1), x, qk.permute(1, 2, 0))  # [batch, key pos, head]
    pattern = F.softmax(scores, dim=1)
    mixed = torch.bmm(pattern.transpose(1, 2), x)  # [batch, H, D]
    ov = torch.bmm(attn.W_V, attn.W_O).reshape(H * D, D)
    const = attn.b_V.reshape(-1) @ attn.W_O.reshape(H * dh, D) + attn.b_O
    if cdt == x.dtype:
        return torch.addmm(resid_last + const, mixed.view(batch, H * D), ov)
    return resid_last + torch.addmm(const.to(cdt), mixed.view(batch, H * D).to(cdt), ov.to(cdt))


def fast_readout(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], *, minibatch: bool = False
) -> Float[Tensor, "batch d_vocab_out"]:
    """Return `model(tokens)[:, -1]` of a `Transformer`, without hooks, fast.

    Differentiable with respect to every parameter; equal to the hooked forward pass to 1e-5 in
    fp32. Honours an enclosing `torch.autocast` (bfloat16 for the large matmuls); the logits are
    in the parameters' dtype either way. Hooks are not run: use it for training (and for a loss
    that needs no hooks, as the LLC's sampler), and the hooked forward for analyses.

    Args:
        model: A `models.transformer.Transformer`.
        tokens: Token ids `[batch, pos]`, `pos <= n_ctx`.
        minibatch: `tokens` are a random minibatch, used once (the LLC sampler's): no CSR plans
            (`models.csr`: their sort pays only when a batch recurs, as in full-batch training)
            and prefix tables only from 8 examples a prefix (`prefix_len`). The same logits.
    """
    forward = functools.partial(_fast_readout, minibatch=True) if minibatch else _fast_readout
    return _call(forward, model, tokens)


def _call(
    forward: Callable[[nn.Module, Tensor, torch.dtype], Tensor], model: nn.Module, tokens: Tensor
) -> Tensor:
    """Run `forward(model, tokens, compute dtype)` with an enclosing autocast honoured by hand:
    the compute dtype is autocast's if it is on (else the weights'), and autocast is off inside.
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape [batch, pos], got {tuple(tokens.shape)}")
    device_type = tokens.device.type
    autocast = torch.is_autocast_enabled(device_type)
    cdt = torch.get_autocast_dtype(device_type) if autocast else model.embed.W_E.dtype
    with torch.autocast(device_type, enabled=False):
        return forward(model, tokens, cdt)


def _fast_readout(model: nn.Module, tokens: Tensor, cdt: torch.dtype, minibatch: bool = False) -> Tensor:
    cfg = model.cfg
    batch, n_pos = tokens.shape
    with_plans = not minibatch
    if cfg.n_layers == 1:
        resid = _layer0(model, tokens, cdt, n_pos - 1, with_plans).view(batch, cfg.d_model)
    else:
        n_pre = prefix_len(cfg, batch, n_pos, 8 if minibatch else 2)
        resid = _layer0(model, tokens, cdt, n_pre, with_plans)
        resid = _mlp(model.blocks[0], resid.reshape(-1, cfg.d_model), cdt)
        resid = resid.view(batch, n_pos - n_pre, cfg.d_model)
        for block in model.blocks[1:-1]:
            resid = _full_block(block, resid, cfg.attention_dir == "causal", cdt)
        last = model.blocks[-1]
        x = _ln(last.ln1, resid)
        if n_pre:
            x = torch.cat([_prefix_keys(model, tokens, cdt, n_pre, with_plans), x], 1)
        resid = _last_attention(last, x, resid[:, -1], cdt)
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
