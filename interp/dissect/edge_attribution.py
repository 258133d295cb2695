"""Edge scores: exact edge patching, EAP and EAP-IG, and how well the estimates agree.

The score of an edge is the change of the metric when that edge alone takes its value from the
corrupted run (`interp.dissect.edges`), averaged over pairs. The metric is the logit difference
at the readout, ``LD = logit[y_clean] - logit[y_corrupt]``, so an edge the behaviour needs has a
negative score, and the clean-corrupted gap is ``LD(clean) - LD(corrupt)``.

* **exact** edge patching runs the model once per edge (batched; every edge of a 2-layer model
  costs a few hundred forward passes of each pair).
* **EAP** (edge attribution patching; Syed, Rager and Conmy, 2023) is its first-order estimate
  from one forward and one backward pass: ``(corrupt_u - clean_u) . dLD/d(input of r)`` at the
  clean run, for every edge ``u -> r`` at once (the receiver input's gradient, dotted with the
  upstream node's change of output at the edge's position).
* **EAP-IG** (Hanna, Pezzelle and Belinkov, 2024) averages that gradient over ``steps`` runs whose
  token embeddings lie on the straight line from the clean to the corrupted input
  (``alpha = (k + 1/2) / steps``, the midpoint rule), as integrated gradients does. Its scores of
  the edges leaving the embedding sum to the clean-corrupted gap up to the discretisation
  (completeness); EAP's do not.

Agreement of an estimate with exact patching: Spearman's rho over edges and the overlap of the
top-k edges by absolute score, both over the *active* edges. An edge whose upstream node's
output is the same on the clean and the corrupted run (a position the pairs never edit, the
positional embedding, anything causally before the edit) scores exactly 0 under every method;
on a 1-layer model at sequence length 6 that is most of the graph. Left in, those ties would
count as agreement (two top-k lists padded with the same zero edges overlap perfectly whatever
the estimate says), so they are left out, and k is capped at the number of edges exact patching
finds active.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interp.dissect.edges import (
    DEFAULT_MAX_ROWS,
    EdgeGraph,
    run_with_edges,
    upstream_outputs,
)
from interp.dissect.hooks import HookFn, checked_hooks
from interp.dissect.patching import PatchPairs, example_logit_diff
from interp.dissect.rank_stats import pearson, spearman

METHODS = ("exact", "eap", "eap_ig")


def pair_metric(logits: Float[Tensor, "... batch d_vocab_out"], pairs: PatchPairs) -> Tensor:
    """LD of each pair, ``logit[y_clean] - logit[y_corrupt]`` (clean = `pairs.source_*`)."""
    return example_logit_diff(logits, pairs.source_labels, pairs.target_labels)


def patched_metric(
    model: nn.Module,
    graph: EdgeGraph,
    pairs: PatchPairs,
    weights: Float[Tensor, "variant edge"],
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Float[Tensor, "variant batch"]:
    """LD of every pair with each variant's edges patched from the corrupted run (chunked).

    Args:
        model: A `models.Transformer` with split inputs.
        graph: Its `edge_graph` at the pairs' length.
        pairs: Clean inputs (`source_*`) and corrupted ones (`target_*`), aligned.
        weights: 1 = patched, per variant and edge.
        max_rows: Most rows (variants x pairs) in one forward pass.
    """
    n_pairs = max(1, min(len(pairs), max_rows))
    n_variants = max(1, max_rows // n_pairs)
    out = []
    for start in range(0, len(pairs), n_pairs):
        chunk = pairs.rows(start, start + n_pairs)
        corrupt = upstream_outputs(model, chunk.target_tokens)
        parts = [
            pair_metric(run_with_edges(model, graph, chunk.source_tokens, corrupt, w), chunk)
            for w in weights.split(n_variants)
        ]
        out.append(torch.cat(parts))
    return torch.cat(out, dim=1)


@torch.no_grad()
def baselines(model: nn.Module, pairs: PatchPairs) -> tuple[Tensor, Tensor]:
    """LD of every pair on the clean and on the corrupted run (plain forward passes), [batch] each."""
    clean = pair_metric(model(pairs.source_tokens)[:, -1], pairs)
    corrupt = pair_metric(model(pairs.target_tokens)[:, -1], pairs)
    return clean, corrupt


def exact_scores(
    model: nn.Module, graph: EdgeGraph, pairs: PatchPairs, max_rows: int = DEFAULT_MAX_ROWS
) -> Float[Tensor, " edge"]:
    """Mean change of LD when each edge alone is patched from the corrupted run."""
    eye = torch.eye(graph.n_edges)
    clean, _ = baselines(model, pairs)
    return (patched_metric(model, graph, pairs, eye, max_rows) - clean).mean(-1)


def _saving_leaf(store: dict[str, Tensor], name: str) -> HookFn:
    def hook(act: Tensor, hook: object) -> Tensor:
        if not act.requires_grad:  # frozen weights upstream: a leaf, so the gradient starts here
            act = act.detach().requires_grad_(True)
        store[name] = act
        return act

    return hook


def _interpolating(corrupt_embed: Tensor, alphas: Tensor) -> HookFn:
    """Write ``clean + alpha (corrupt - clean)`` at `hook_embed`; rows are alpha-major copies."""

    def hook(act: Tensor, hook: object) -> Tensor:
        clean = act.view(len(alphas), -1, *act.shape[1:])
        return (clean + alphas.view(-1, 1, 1, 1) * (corrupt_embed.unsqueeze(0) - clean)).reshape(act.shape)

    return hook


def _mean_receiver_gradients(
    model: nn.Module, graph: EdgeGraph, pairs: PatchPairs, alphas: Tensor, corrupt_embed: Tensor
) -> dict[str, Tensor]:
    """dLD/d(receiver input) of each pair, averaged over the interpolation points `alphas`."""
    store: dict[str, Tensor] = {}
    hooks = [("hook_embed", _interpolating(corrupt_embed, alphas))]
    hooks += [(g.hook, _saving_leaf(store, g.hook)) for g in graph.groups]
    tokens = pairs.source_tokens.repeat(len(alphas), 1)
    names = [g.hook for g in graph.groups]
    with torch.enable_grad():
        with checked_hooks(model, hooks):  # raises here, naming any receiver hook that never fired
            logits = model(tokens)[:, -1]
        ld = pair_metric(logits.view(len(alphas), len(pairs), -1), pairs)
        grads = torch.autograd.grad(ld.sum(), [store[n] for n in names])
    return {n: g.view(len(alphas), len(pairs), *g.shape[1:]).mean(0) for n, g in zip(names, grads)}


def gradient_scores(
    model: nn.Module,
    graph: EdgeGraph,
    pairs: PatchPairs,
    steps: int = 0,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Float[Tensor, "batch edge"]:
    """EAP (``steps=0``) or EAP-IG (``steps`` midpoint-rule points) score of every edge and pair.

    Returns:
        ``(corrupt_u - clean_u)[pos] . grad_r[pos, head]`` per pair and edge (mean over pairs:
        the edge's score).
    """
    alphas = torch.tensor([0.0]) if steps == 0 else (torch.arange(steps) + 0.5) / steps
    n_pairs = max(1, max_rows // len(alphas))
    out = []
    for start in range(0, len(pairs), n_pairs):
        chunk = pairs.rows(start, start + n_pairs)
        clean, corrupt = (
            upstream_outputs(model, chunk.source_tokens),
            upstream_outputs(model, chunk.target_tokens),
        )
        delta = corrupt - clean  # [batch, upstream, pos, d_model]
        grads = _mean_receiver_gradients(model, graph, chunk, alphas.to(delta.dtype), corrupt[:, 0])
        scores = []
        for g in graph.groups:
            d = delta[:, : g.n_upstream]
            grad = grads[g.hook]
            grid = torch.einsum("bphd,bupd->buph" if g.n_heads else "bpd,bupd->bup", grad, d)
            scores.append(grid[:, :, list(g.positions)].reshape(len(chunk), -1))
        out.append(torch.cat(scores, dim=1))
    return torch.cat(out)


@dataclass(frozen=True)
class Agreement:
    """How an estimate's edge scores agree with exact patching's, over the active edges.

    Attributes:
        spearman: Spearman's rho over the active edges (NaN if either is constant there).
        pearson: Pearson's r over the active edges.
        top_k_overlap: Fraction of exact patching's top-k edges (by ``|score|``) also in the estimate's.
        k: The k used (the one asked for, capped at the edges exact patching finds active).
        n_active: Edges where exact patching or the estimate is nonzero (`ZERO` relative to the largest).
    """

    spearman: float
    pearson: float
    top_k_overlap: float
    k: int
    n_active: int


ZERO = 1e-6  # |score| at most this times the largest |score| counts as 0 (float noise of a no-op patch)


def top_k(scores: Tensor, k: int) -> set[int]:
    """Indices of the k largest ``|scores|`` (ties to the lower index)."""
    order = torch.sort(scores.abs(), descending=True, stable=True).indices
    return set(order[:k].tolist())


def agreement(estimate: Float[Tensor, " edge"], exact: Float[Tensor, " edge"], k: int) -> Agreement:
    """`Agreement` of `estimate` with `exact` over the edges where either is nonzero.

    Args:
        estimate: An estimate's score per edge (EAP, EAP-IG).
        exact: Exact patching's score per edge.
        k: k of the top-k overlap; capped at the number of edges exact patching finds active
            (at least 1). With none active, the overlap is NaN.
    """
    scale = max(estimate.abs().max().item(), exact.abs().max().item(), 0.0) if len(exact) else 0.0
    tol = ZERO * scale
    active = (exact.abs() > tol) | (estimate.abs() > tol)
    est, ref = estimate[active], exact[active]
    n_exact = int((ref.abs() > tol).sum())
    k = max(1, min(k, n_exact))
    overlap = len(top_k(est, k) & top_k(ref, k)) / k if n_exact else float("nan")
    return Agreement(
        spearman(est, ref).item() if len(ref) else float("nan"),
        pearson(est, ref).item() if len(ref) else float("nan"),
        overlap,
        k,
        int(active.sum()),
    )
