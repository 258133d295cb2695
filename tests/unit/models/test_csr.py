"""`models.csr`: the CSR forms of the fast forward's gathers equal their dense definitions, the
fast forward takes them (and its dense path under `torch.func`), and the per-batch cache is
invalidated by an in-place write to the tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from models import csr
from models.config import TransformerConfig
from models.fast_forward import fast_readout
from models.transformer import Transformer


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_sum_rows_equals_index_add():
    index = torch.randint(0, 7, (30,), generator=_gen(0))
    src, weights = torch.randn(10, 4, generator=_gen(1)), torch.rand(30, generator=_gen(2))
    plan = csr.IndexPlan(index, 7)
    # k = 3 entries per source row, weighted
    expected = torch.zeros(7, 4).index_add(0, index, src.repeat_interleave(3, 0) * weights[:, None])
    torch.testing.assert_close(plan.sum_rows(src, weights), expected)
    one = csr.IndexPlan(index, 7)  # k = 1, unweighted: a gather's backward
    grad = torch.randn(30, 4, generator=_gen(3))
    torch.testing.assert_close(csr.gather_backward(one, grad), torch.zeros(7, 4).index_add(0, index, grad))
    column = torch.randn(30, 1, generator=_gen(4))  # one column: bincount
    torch.testing.assert_close(
        csr.gather_backward(one, column), torch.zeros(7, 1).index_add(0, index, column)
    )


def test_mix_and_its_gradients_equal_autograd_of_the_dense_product():
    m, k, n, c = 12, 5, 9, 6
    index = torch.randint(0, n, (m * k,), generator=_gen(5))
    plan = csr.IndexPlan(index, n)
    pattern = torch.rand(m, k, generator=_gen(6)).requires_grad_()
    table = torch.randn(n, c, generator=_gen(7)).requires_grad_()
    resid = torch.randn(m, c, generator=_gen(8))
    dense = resid + (pattern.unsqueeze(-1) * table[index.view(m, k)]).sum(1)
    torch.testing.assert_close(csr.mix(plan, pattern.detach(), table.detach(), resid), dense.detach())
    grad = torch.randn(m, c, generator=_gen(9))
    dense.backward(grad)
    g_table, g_pattern = csr.mix_backward(plan, pattern.detach(), table.detach(), grad)
    torch.testing.assert_close(g_table, table.grad)
    torch.testing.assert_close(g_pattern, pattern.grad)


def _model(seed: int = 5) -> Transformer:
    cfg = TransformerConfig(
        n_layers=2,
        n_heads=2,
        d_model=24,
        d_mlp=32,
        n_ctx=6,
        d_vocab=5,
        d_vocab_out=3,
        normalization_type="LN",
        attention_dir="causal",
        act_fn="relu",
    )
    return Transformer(cfg, seed=seed)


def _grads(model, logits, labels):
    model.zero_grad(set_to_none=True)
    F.cross_entropy(logits, labels).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def test_fast_forward_takes_the_csr_path_and_equals_the_dense_one(monkeypatch):
    # batch 64 at vocab 5: prefix tables of two positions, so both layer-0 calls take the path
    model = _model()
    tokens = torch.randint(0, 5, (64, 6), generator=_gen(10))
    labels = torch.randint(0, 3, (64,), generator=_gen(11))
    calls = {"mix": 0, "mix_backward": 0, "gather_backward": 0}
    for name in calls:
        original = getattr(csr, name)

        def counted(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(csr, name, counted)
    sparse = _grads(model, fast_readout(model, tokens), labels)
    assert calls == {"mix": 2, "mix_backward": 2, "gather_backward": 5}  # 2 x (score, resid) + prefix
    monkeypatch.setattr(csr, "ENABLED", False)
    dense = _grads(model, fast_readout(model, tokens), labels)
    hooked = _grads(model, model(tokens)[:, -1], labels)
    assert calls["mix"] == 2  # the switch turns it off
    for name in hooked:
        torch.testing.assert_close(sparse[name], hooked[name], atol=1e-5, rtol=1e-4, msg=name)
        torch.testing.assert_close(sparse[name], dense[name], atol=1e-6, rtol=1e-5, msg=name)


def test_cache_follows_views_and_in_place_writes():
    model = _model()
    tokens = torch.randint(0, 5, (40, 6), generator=_gen(12))
    first = csr.cached_plan(tokens, "test", lambda: object())
    assert csr.cached_plan(tokens[:], "test", lambda: object()) is first  # a view: same batch
    torch.testing.assert_close(fast_readout(model, tokens), model(tokens)[:, -1], atol=1e-5, rtol=0)
    tokens[:, 3] = (tokens[:, 3] + 1) % 5  # in place: the cached plans must not be reused
    assert csr.cached_plan(tokens, "test", lambda: object()) is not first
    labels = torch.randint(0, 3, (40,), generator=_gen(13))
    fast = _grads(model, fast_readout(model, tokens), labels)
    hooked = _grads(model, model(tokens)[:, -1], labels)
    for name in hooked:
        torch.testing.assert_close(fast[name], hooked[name], atol=1e-5, rtol=1e-4, msg=name)


def test_inference_mode_first_then_training():
    # Nothing built in inference mode may be cached: training would save it for backward.
    model = _model()
    tokens = torch.randint(0, 5, (64, 6), generator=_gen(14))
    labels = torch.randint(0, 3, (64,), generator=_gen(15))
    with torch.inference_mode():
        fast_readout(model, tokens)
    fast = _grads(model, fast_readout(model, tokens), labels)
    hooked = _grads(model, model(tokens)[:, -1], labels)
    for name in hooked:
        torch.testing.assert_close(fast[name], hooked[name], atol=1e-5, rtol=1e-4, msg=name)
