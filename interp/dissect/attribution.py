"""Attribution patching: the first-order (gradient) approximation of activation patching.

Activation patching (`interp.dissect.patching`) overwrites one slice ``a`` of one activation
on the target run by its source value and measures the metric again, one forward pass per
patch. Attribution patching replaces each of those runs by a linear estimate: with ``M`` the
logit difference ``logit[y_source] - logit[y_target]`` at the readout,

    M(target with a := a_source) - M(target) ~= (dM/da at the target run) . (a_source - a_target),

summed over the elements of the slice. Every site and index comes from one cached forward
pass on the sources, one forward pass on the targets that keeps the activations in the
autograd graph, and one backward pass (`torch.autograd.grad`) of the per-pair logit
differences summed over pairs; pairs do not interact inside the model, so the gradient of the
sum holds each pair's own gradient, and the per-pair estimates are kept.

The estimate is exact wherever the metric is linear in the patched activation: without a
final LayerNorm, `resid_post` and `mlp_out` of the last layer; and if the last MLP's output
does not depend on its input, also that layer's `attn_out`, `z`, `z_pos` and `pattern`
(softmax is upstream of the pattern, and ``z = pattern @ v`` with v unpatched). Elsewhere it
is an approximation whose quality is measured by comparing with activation patching
(``interp attribute --compare``). Sites, axes and layouts are those of `SITES`.

References: Neel Nanda, "Attribution Patching: Activation Patching At Industrial Scale" (2023);
Syed, Rager and Conmy, "Attribution Patching Outperforms Automated Circuit Discovery" (2023).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interp.dissect.hooks import cache_activations
from interp.dissect.patching import (
    PatchPairs,
    example_logit_diff,
    hook_name,
    parse_sites,
    recovery,
    site_axes,
)

# site -> activation dimensions summed over (after the batch), leaving the site's index axes in
# `SITES` order: resid [b, pos, d_model] keeps pos; z [b, pos, head, d_head] keeps head (z) or
# pos and head (z_pos); pattern [b, head, q, k] keeps head.
SUMMED_DIMS: dict[str, tuple[int, ...]] = {
    "resid_pre": (2,),
    "resid_mid": (2,),
    "resid_post": (2,),
    "attn_out": (2,),
    "mlp_out": (2,),
    "z": (1, 3),
    "z_pos": (3,),
    "pattern": (2, 3),
}
DEFAULT_MAX_PAIRS = 4096  # pairs per forward/backward pass (bounds the activations kept for the backward)


@dataclass(frozen=True)
class SiteAttribution:
    """Attribution-patching estimates for every index of one site.

    Attributes:
        site: The site (a key of `SITES`).
        axes: Axis names, e.g. ``("layer", "pos")``.
        logit_diff: Estimated patched logit difference per index (target LD + mean attribution).
        recovery: The estimate's normalised recovery per index.
        per_example: Estimated patched logit difference of every pair, [*index shape, batch].
    """

    site: str
    axes: tuple[str, ...]
    logit_diff: Tensor
    recovery: Tensor
    per_example: Tensor


@dataclass(frozen=True)
class AttributionSweep:
    """Baselines of a pairing and the attribution estimate of every requested site.

    Attributes:
        source_logit_diff: LD of the unpatched source runs.
        target_logit_diff: LD of the unpatched target runs.
        source_per_example: LD of each source run, [batch].
        target_per_example: LD of each target run, [batch].
        effects: Per site.
    """

    source_logit_diff: float
    target_logit_diff: float
    source_per_example: Tensor
    target_per_example: Tensor
    effects: dict[str, SiteAttribution]


def _chunk_attributions(
    model: nn.Module, pairs: PatchPairs, hooks: list[str]
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """Source and target LD per pair, and ``grad . (source - target)`` elementwise per hook."""
    labels = (pairs.source_labels, pairs.target_labels)
    with torch.no_grad():
        source_logits, source = cache_activations(model, pairs.source_tokens, hooks)
    with torch.enable_grad():
        target_logits, target = cache_activations(model, pairs.target_tokens, hooks, keep_graph=True)
        target_each = example_logit_diff(target_logits[:, -1], *labels)
        # Identity hook points hand the same tensor on (resid_post of layer l is resid_pre of l + 1):
        # differentiate and multiply each distinct tensor once.
        distinct = list({id(target[h]): target[h] for h in hooks}.values())
        grads = dict(zip(map(id, distinct), torch.autograd.grad(target_each.sum(), distinct)))
    done: dict[int, Tensor] = {}
    products = {}
    for h in hooks:
        key = id(target[h])
        if key not in done:
            done[key] = grads[key] * (source[h] - target[h].detach())
        products[h] = done[key]
    return example_logit_diff(source_logits[:, -1], *labels), target_each.detach(), products


def _site_estimates(
    products: dict[str, Tensor], site: str, n_layers: int
) -> Float[Tensor, "layer *index batch"]:
    """Sum each layer's elementwise attribution over the site's non-index dimensions."""
    per_layer = [products[hook_name(site, layer)].sum(SUMMED_DIMS[site]) for layer in range(n_layers)]
    return torch.stack(per_layer).movedim(1, -1)  # [layer, batch, *index] -> [layer, *index, batch]


def attribution_sweep(
    model: nn.Module,
    pairs: PatchPairs,
    sites: str | Sequence[str] = tuple(SUMMED_DIMS),
    max_pairs: int = DEFAULT_MAX_PAIRS,
) -> AttributionSweep:
    """Attribution-patching estimates for every index of every site (layouts as in `SITES`).

    Args:
        model: A TransformerLens-style hooked model with `cfg.n_layers`, `cfg.n_heads`.
        pairs: Source and target inputs and labels, aligned.
        sites: Site names, or a comma-separated string.
        max_pairs: Most pairs in one forward/backward pass.

    Returns:
        Baselines and per-site estimates; ``per_example`` holds each pair's estimate.
    """
    sites = parse_sites(sites)
    n_layers = model.cfg.n_layers
    hooks = sorted({hook_name(s, layer) for s in sites for layer in range(n_layers)})
    sources, targets, estimates = [], [], {s: [] for s in sites}
    for start in range(0, len(pairs), max_pairs):
        source_each, target_each, products = _chunk_attributions(
            model, pairs.rows(start, start + max_pairs), hooks
        )
        sources.append(source_each)
        targets.append(target_each)
        for site in sites:
            estimates[site].append(target_each + _site_estimates(products, site, n_layers))
    source_each, target_each = torch.cat(sources), torch.cat(targets)
    ld_source, ld_target = source_each.mean().item(), target_each.mean().item()
    effects = {}
    for site in sites:
        each = torch.cat(estimates[site], dim=-1)
        ld = each.mean(-1)
        effects[site] = SiteAttribution(site, site_axes(site), ld, recovery(ld, ld_source, ld_target), each)
    return AttributionSweep(ld_source, ld_target, source_each, target_each, effects)
