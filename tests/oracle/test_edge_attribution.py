"""Oracle: edge patching, EAP and EAP-IG (`interp.dissect.edges`, `edge_attribution`, `circuits`).

Independent computations use plain torch `register_forward_hook` hooks on the model's modules,
not `interp`'s hook machinery:

* patching one edge = adding (corrupt - clean) of the upstream node's output at the edge's
  position (and head) to the receiver's input;
* every EAP score = the derivative in alpha of the metric when that addition is scaled by alpha;
* EAP equals exact patching where the metric is linear in every edge (no LayerNorm, attention
  patterns frozen by zero queries and keys, MLPs constant), and patching a set of edges then
  adds up their single effects; with LayerNorm it does not (the oracle is not vacuous);
* EAP-IG is complete: the scores of the edges leaving the token embedding sum, per pair, to
  LD(corrupt) - LD(clean) up to the discretisation, which shrinks with more steps.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import spearmanr

import tasks
from interp.dissect.circuits import faithfulness_curve, reaches, smallest_faithful
from interp.dissect.edge_attribution import (
    agreement,
    baselines,
    exact_scores,
    gradient_scores,
    pair_metric,
    patched_metric,
)
from interp.dissect.edges import edge_graph, with_split_inputs
from interp.dissect.patching import PatchPairs
from interp.errors import HookError
from tests.oracle.oracle_models import random_transformer

ATOL = 1e-5
TASK = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32)


@pytest.fixture(scope="module")
def pairs() -> PatchPairs:
    adv = TASK.splits(0)["adv"]
    partner = tasks.counterfactual(TASK, adv, flip="label")
    keep = partner.extras["valid"]
    return PatchPairs(adv.tokens[keep], partner.tokens[keep], adv.labels[keep], partner.labels[keep]).head(10)


def _model(seed: int = 0, **overrides):
    return with_split_inputs(random_transformer(TASK, seed=seed, **overrides))


def _linear_model():
    """No LayerNorm, uniform attention (zero queries and keys), constant MLPs: LD is linear in every edge."""
    model = _model(seed=3, normalization_type=None)
    with torch.no_grad():
        for block in model.blocks:
            for name in ("W_Q", "W_K", "b_Q", "b_K"):
                getattr(block.attn, name).zero_()
            block.mlp.W_in.zero_()
    return model


def _raw_outputs(model, tokens) -> dict[str, torch.Tensor]:
    """Every upstream node's output, recorded with plain torch hooks: {name: [batch, pos, d_model]}."""
    out: dict[str, torch.Tensor] = {}
    handles = [model.hook_embed.register_forward_hook(lambda m, i, o: out.setdefault("embed", o.detach()))]
    handles.append(model.hook_pos_embed.register_forward_hook(lambda m, i, o: out.setdefault("pos_embed", o)))
    for layer, block in enumerate(model.blocks):

        def heads(m, i, z, layer=layer, w_o=block.attn.W_O):
            for h in range(z.shape[2]):
                out[f"L{layer}H{h}"] = (z[:, :, h] @ w_o[h]).detach()

        handles.append(block.attn.hook_z.register_forward_hook(heads))
        handles.append(
            block.hook_mlp_out.register_forward_hook(
                lambda m, i, o, layer=layer: out.setdefault(f"MLP{layer}", o)
            )
        )
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return {k: v.expand(len(tokens), -1, -1).detach() for k, v in out.items()}


def _receiver_module(model, edge):
    if edge.receiver == "logits":
        return model.blocks[-1].hook_resid_post
    if edge.receiver.startswith("MLP"):
        return model.blocks[edge.layer].hook_mlp_in
    return getattr(model.blocks[edge.layer], f"hook_{edge.receiver[-1]}_input")


def _raw_edge_run(model, pairs, edge, alpha: torch.Tensor) -> torch.Tensor:
    """LD per pair when the receiver's input gains alpha_i (corrupt - clean) of the upstream output."""
    clean, corrupt = _raw_outputs(model, pairs.source_tokens), _raw_outputs(model, pairs.target_tokens)
    delta = (corrupt[edge.upstream] - clean[edge.upstream])[:, edge.pos]  # [batch, d_model]

    def add(module, inputs, out):
        out = out.clone()
        index = (slice(None), edge.pos) if edge.head is None else (slice(None), edge.pos, edge.head)
        out[index] = out[index] + alpha.view(-1, 1) * delta
        return out

    handle = _receiver_module(model, edge).register_forward_hook(add)
    try:
        logits = model(pairs.source_tokens)[:, -1]
    finally:
        handle.remove()
    return pair_metric(logits, pairs)


def test_no_edge_patched_is_the_clean_run_and_every_edge_the_corrupted_one(pairs):
    model = _model()
    graph = edge_graph(model, TASK.n_ctx)
    clean, corrupt = baselines(model, pairs)
    ld = patched_metric(
        model, graph, pairs, torch.stack([torch.zeros(graph.n_edges), torch.ones(graph.n_edges)])
    )
    torch.testing.assert_close(ld[0], clean, atol=ATOL, rtol=0)
    torch.testing.assert_close(ld[1], corrupt, atol=ATOL, rtol=0)
    assert (clean - corrupt).abs().max() > 0.1  # the two runs differ: the check is not vacuous


def test_graph_counts_edges_through_the_residual_stream():
    graph = edge_graph(_model(), TASK.n_ctx)
    n_pos, edges = TASK.n_ctx, graph.edges()
    # per position: L0 q/k/v of 2 heads from embed+pos (12), MLP0 from 4, L1 q/k/v from 5 (30), MLP1 from 7
    assert graph.n_edges == len(edges) == n_pos * (12 + 4 + 30 + 7) + 8
    assert {e.pos for e in edges if e.receiver == "logits"} == {n_pos - 1}
    assert len({e.name for e in edges}) == len(edges)


def test_every_exact_score_is_a_raw_hook_edge_patch(pairs):
    model = _model(seed=1)
    graph = edge_graph(model, TASK.n_ctx)
    scores = exact_scores(model, graph, pairs, max_rows=700)  # several chunks of variants
    clean, _ = baselines(model, pairs)
    ones = torch.ones(len(pairs))
    for i, edge in enumerate(graph.edges()):
        if i % 11 == 0 or edge.receiver == "logits":
            want = (_raw_edge_run(model, pairs, edge, ones) - clean).mean()
            torch.testing.assert_close(scores[i], want, atol=ATOL, rtol=0, msg=edge.name)


def test_every_eap_score_is_the_raw_hook_directional_derivative(pairs):
    model = _model(seed=2)
    graph = edge_graph(model, TASK.n_ctx)
    per_pair = gradient_scores(model, graph, pairs, max_rows=4)  # chunks of 4 pairs
    for i, edge in enumerate(graph.edges()):
        if i % 11 == 3 or edge.receiver == "logits":
            alpha = torch.zeros(len(pairs), requires_grad=True)
            (grad,) = torch.autograd.grad(_raw_edge_run(model, pairs, edge, alpha).sum(), alpha)
            torch.testing.assert_close(per_pair[:, i], grad, atol=ATOL, rtol=0, msg=edge.name)


def test_eap_is_exact_and_additive_where_the_metric_is_linear(pairs):
    model = _linear_model()
    graph = edge_graph(model, TASK.n_ctx)
    exact = exact_scores(model, graph, pairs)
    eap = gradient_scores(model, graph, pairs).mean(0)
    torch.testing.assert_close(eap, exact, atol=ATOL, rtol=0)
    assert exact.abs().max() > 0.02 and (exact.abs() > 1e-3).sum() > 20  # not vacuous
    # Edges from the embeddings never feed one another's upstream node, so in a linear model
    # patching several adds up their effects (edges in a chain would not: the later edge's
    # receiver takes the corrupted value whatever the earlier edge did to its upstream node).
    gen = torch.Generator().manual_seed(0)
    from_embeddings = torch.tensor([e.upstream in ("embed", "pos_embed") for e in graph.edges()])
    some = ((torch.rand(graph.n_edges, generator=gen) < 0.5) & from_embeddings).float()
    clean, _ = baselines(model, pairs)
    together = (patched_metric(model, graph, pairs, some[None])[0] - clean).mean()
    torch.testing.assert_close(together, (exact * some).sum(), atol=ATOL, rtol=0)


def test_eap_is_not_exact_with_layernorm(pairs):
    model = _model(seed=2)
    graph = edge_graph(model, TASK.n_ctx)
    eap = gradient_scores(model, graph, pairs).mean(0)
    assert (eap - exact_scores(model, graph, pairs)).abs().max() > 1e-3


def test_eap_ig_is_complete_on_the_embedding_edges(pairs):
    # GELU: a smooth integrand, so the midpoint rule's error falls as 1/steps^2 (ReLU kinks make it 1/steps).
    model = _model(seed=4, act_fn="gelu")
    graph = edge_graph(model, TASK.n_ctx)
    from_embed = torch.tensor([e.upstream == "embed" for e in graph.edges()])
    clean, corrupt = baselines(model, pairs)
    errors = {}
    for steps in (2, 64):
        total = gradient_scores(model, graph, pairs, steps=steps)[:, from_embed].sum(1)
        errors[steps] = (total - (corrupt - clean)).abs().max().item()
    assert errors[64] < 1e-3 * (corrupt - clean).abs().max().item()
    assert errors[64] < errors[2] / 100  # the error is the discretisation's
    eap = gradient_scores(model, graph, pairs)[:, from_embed].sum(1)
    assert (eap - (corrupt - clean)).abs().max() > 100 * errors[64]  # EAP is not complete


def test_agreement_is_one_for_identical_scores_and_ranks_by_magnitude():
    x = torch.tensor([3.0, -5.0, 0.1, 1.0])
    same = agreement(x, x, k=2)
    assert same.spearman == pytest.approx(1.0) and same.top_k_overlap == 1.0
    # top-2 by |score|: {1, 0} for x, {1, 3} below: half of them shared
    assert agreement(torch.tensor([0.0, -5.0, 0.1, 2.0]), x, k=2).top_k_overlap == 0.5


def test_faithfulness_runs_from_zero_to_one_and_the_smallest_circuit_is_the_smallest(pairs):
    model = _model(seed=5)
    graph = edge_graph(model, TASK.n_ctx)
    scores = exact_scores(model, graph, pairs)
    every = faithfulness_curve(model, graph, pairs, scores, sizes=list(range(graph.n_edges + 1)))
    assert every.faithfulness[0].item() == pytest.approx(0.0, abs=ATOL)
    assert every.faithfulness[-1].item() == pytest.approx(1.0, abs=ATOL)
    coarse = faithfulness_curve(model, graph, pairs, scores)
    for target in (0.5, 0.8):
        k, value = smallest_faithful(model, graph, pairs, scores, coarse, target)
        first = next(i for i, f in enumerate(every.faithfulness.tolist()) if reaches(f, target))
        assert k is not None and k <= first or coarse.faithfulness.max() < target
        if k is not None:
            assert target <= value <= 2 - target
            assert value == pytest.approx(every.faithfulness[k].item(), abs=ATOL)


def test_an_overshooting_circuit_does_not_reach_the_target():
    # A circuit with faithfulness 12 reproduces a different behaviour, not the clean one.
    assert reaches(0.95, 0.9) and reaches(1.05, 0.9) and reaches(1.0, 1.0)
    assert not reaches(12.0, 0.9) and not reaches(1.2, 0.9) and not reaches(0.85, 0.9)
    assert not reaches(float("nan"), 0.5)


def test_agreement_leaves_out_edges_every_method_scores_zero():
    # Edges from a node the pairs never change score exactly 0 everywhere; counted, they would
    # pad both top-k lists with the same zero edges and tie in every rank.
    exact = torch.tensor([3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    reversed_ranks = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    a = agreement(reversed_ranks, exact, k=5)
    assert (a.n_active, a.k) == (3, 3)
    assert a.top_k_overlap == 1.0  # all three active edges, in any order
    assert a.spearman == pytest.approx(-1.0)
    assert spearmanr(reversed_ranks, exact).statistic > 0.5  # what the zeros would have made of it
    assert agreement(reversed_ranks, exact, k=1).top_k_overlap == 0.0
    assert math.isnan(agreement(torch.zeros(4), torch.zeros(4), k=2).top_k_overlap)  # nothing to agree on


def test_edge_patching_cannot_fail_silently(pairs):
    model = _model()
    graph = edge_graph(model, TASK.n_ctx)
    model.blocks[1].hook_k_input = torch.nn.Identity()  # off the forward path, as a replaced module is
    with pytest.raises(HookError, match=r"blocks\.1\.hook_k_input.*never fired"):
        patched_metric(model, graph, pairs, torch.zeros(1, graph.n_edges))
    with pytest.raises(HookError, match="never fired"):
        gradient_scores(model, graph, pairs)
