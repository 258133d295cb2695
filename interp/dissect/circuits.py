"""Circuits from edge scores, and their faithfulness.

A circuit is a set of kept edges: the top-k edges by ``|score|``, or those with ``|score|`` at least a
threshold. Its faithfulness is the fraction of the clean-corrupted gap it recovers on its own:
the clean run with every edge *outside* the circuit patched from the corrupted run
(`interp.dissect.edges`),

    faithfulness(C) = (LD(C) - LD(corrupt)) / (LD(clean) - LD(corrupt)),

1 for the full graph (nothing patched), 0 for the empty circuit (everything patched: exactly
the corrupted run). Over circuit sizes k it is a curve; the smallest circuit that reaches a
chosen faithfulness t is read from it, refined to every size between the last grid point that
does not and the first that does. Reaching t means landing within 1 - t of 1 on *either* side,
t <= faithfulness <= 2 - t: patching many edges at once is not additive, and a small circuit can
overshoot the clean run several times over (it then reproduces a different behaviour, not the
clean one). Faithfulness divides by the gap: below `MIN_GAP` logits it is undefined (NaN), as
patching's recovery is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from interp.dissect.edge_attribution import baselines, patched_metric
from interp.dissect.edges import DEFAULT_MAX_ROWS, EdgeGraph
from interp.dissect.patching import PatchPairs

MIN_GAP = 0.1  # logits; the same threshold as patching's recovery (analyses.effects.MIN_RECOVERY_GAP)


def ranking(scores: Tensor) -> Tensor:
    """Edge indices by decreasing ``|score|`` (ties to the lower index)."""
    return torch.sort(scores.abs(), descending=True, stable=True).indices


def circuit_weights(order: Tensor, sizes: list[int]) -> Tensor:
    """Patch weights [size, edge]: 0 for the first `k` edges of `order` (kept), 1 elsewhere."""
    keep = torch.zeros(len(sizes), len(order))
    for i, k in enumerate(sizes):
        keep[i, order[:k]] = 1.0
    return 1.0 - keep


def size_grid(n_edges: int, points: int = 40) -> list[int]:
    """0, n_edges and about `points` sizes between, denser at small sizes (geometric)."""
    grid = np.unique(np.round(np.geomspace(1, n_edges, points)).astype(int)) if n_edges else []
    return sorted({0, n_edges, *map(int, grid)})


@dataclass(frozen=True)
class FaithfulnessCurve:
    """Faithfulness of the top-k circuits.

    Attributes:
        sizes: Circuit sizes k.
        logit_diff: Mean LD of the circuit-only run per size.
        faithfulness: Per size (NaN when the gap is below `MIN_GAP`).
        clean_logit_diff: LD of the clean runs.
        corrupt_logit_diff: LD of the corrupted runs.
    """

    sizes: list[int]
    logit_diff: Tensor
    faithfulness: Tensor
    clean_logit_diff: float
    corrupt_logit_diff: float

    @property
    def defined(self) -> bool:
        """Whether the gap reaches `MIN_GAP`."""
        return abs(self.clean_logit_diff - self.corrupt_logit_diff) >= MIN_GAP


def faithfulness_curve(
    model: nn.Module,
    graph: EdgeGraph,
    pairs: PatchPairs,
    scores: Tensor,
    sizes: list[int] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> FaithfulnessCurve:
    """Faithfulness of the top-k circuits by ``|scores|`` for every k in `sizes` (default `size_grid`)."""
    sizes = size_grid(graph.n_edges) if sizes is None else sorted(set(sizes))
    clean, corrupt = (x.mean().item() for x in baselines(model, pairs))
    ld = patched_metric(model, graph, pairs, circuit_weights(ranking(scores), sizes), max_rows).mean(-1)
    gap = clean - corrupt
    faith = (ld - corrupt) / gap if abs(gap) >= MIN_GAP else torch.full_like(ld, float("nan"))
    return FaithfulnessCurve(sizes, ld, faith, clean, corrupt)


def reaches(faithfulness: float, target: float) -> bool:
    """Whether `faithfulness` is within ``1 - target`` of 1 (either side; NaN never reaches)."""
    return abs(faithfulness - 1.0) <= 1.0 - target + 1e-6  # 1e-6: float noise of the full circuit


def smallest_faithful(
    model: nn.Module,
    graph: EdgeGraph,
    pairs: PatchPairs,
    scores: Tensor,
    curve: FaithfulnessCurve,
    threshold: float,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> tuple[int | None, float]:
    """The smallest top-k circuit whose faithfulness `reaches` `threshold`, and its faithfulness.

    The first grid size of `curve` that reaches it, lowered to the smallest size between the
    grid point before it and it that also does. ``(None, nan)`` when no size reaches it or the
    faithfulness is undefined.
    """
    reached = [i for i, f in enumerate(curve.faithfulness.tolist()) if reaches(f, threshold)]
    if not curve.defined or not reached:
        return None, float("nan")
    i = reached[0]
    if i == 0:
        return curve.sizes[0], curve.faithfulness[0].item()
    between = list(range(curve.sizes[i - 1] + 1, curve.sizes[i]))
    if between:
        finer = faithfulness_curve(model, graph, pairs, scores, between, max_rows)
        for k, f in zip(finer.sizes, finer.faithfulness.tolist()):
            if reaches(f, threshold):
                return k, f
    return curve.sizes[i], curve.faithfulness[i].item()


def threshold_circuit(scores: Tensor, threshold: float) -> Tensor:
    """Bool [edge]: the edges with ``|score|`` >= `threshold` (logits)."""
    return scores.abs() >= threshold
