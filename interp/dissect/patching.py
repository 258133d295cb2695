"""Activation patching between paired inputs (e.g. "patching between splits").

Activation patching runs a model on a *target* (corrupted) input while one activation is
overwritten by its value on a paired *source* (clean) input, and measures how far the output
moves from the target's answer to the source's. Inputs are paired example by example: row i
of the source set goes with row i of the target set.

Sites (TransformerLens hook names) and the shape of their effect tensors:

* ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out``: the hook
  ``blocks.{l}.hook_<site>``, effect ``[layer, pos]``;
* ``z``: ``blocks.{l}.attn.hook_z``, one head at every position, effect ``[layer, head]``;
* ``z_pos``: ``blocks.{l}.attn.hook_z``, one head at one position, effect ``[layer, pos, head]``;
* ``pattern``: ``blocks.{l}.attn.hook_pattern``, one head (all query positions), effect ``[layer, head]``.

The layouts are those of TransformerLens's `patching.get_act_patch_*` functions, which the
oracle tests compare against.

Metrics, at the readout (last) position:

* logit difference ``LD = mean_i (logit[i, y_source_i] - logit[i, y_target_i])``;
* recovery ``(LD_patched - LD_target) / (LD_source - LD_target)``: 0 = no effect, 1 = the
  patch moves the logit difference all the way to the source run's;
* accuracy of the patched run against the source labels.

Speed: one cached run on the sources and one on the targets, then patched runs batched by
`interp.dissect.interventions.run_interventions`: every patch at block l gets its own copy of the target examples inside
one forward pass, made at ``blocks.{l}.hook_resid_pre``, so blocks before l run once for all
copies; and an example whose patch writes exactly what its target run already holds (an
unedited position of a counterfactual pair at layer 0, say) is not run at all. The same
engine serves ablations (`interp.dissect.ablation`): an ablation is a patch with a constant value.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.config import parse_choices
from interp.dissect.hooks import cache_activations
from interp.dissect.interventions import DEFAULT_MAX_ROWS, Index, Intervention, run_interventions
from interp.errors import ConfigError
from interp.splits import Split

# site -> (hook name template, axes after "layer", index into the activation from those axes)
_ALL = slice(None)


@runtime_checkable
class ActivationLookup(Protocol):
    """What patching reads from a cache: activations by hook name, each [batch, ...] (a dict of
    tensors, or TransformerLens's `ActivationCache`).
    """

    def __getitem__(self, name: str) -> Tensor: ...


SITES: dict[str, tuple[str, tuple[str, ...], Callable[..., Index]]] = {
    "resid_pre": ("blocks.{}.hook_resid_pre", ("pos",), lambda p: (p,)),
    "resid_mid": ("blocks.{}.hook_resid_mid", ("pos",), lambda p: (p,)),
    "resid_post": ("blocks.{}.hook_resid_post", ("pos",), lambda p: (p,)),
    "attn_out": ("blocks.{}.hook_attn_out", ("pos",), lambda p: (p,)),
    "mlp_out": ("blocks.{}.hook_mlp_out", ("pos",), lambda p: (p,)),
    "z": ("blocks.{}.attn.hook_z", ("head",), lambda h: (_ALL, h)),  # z: [batch, pos, head, d_head]
    "z_pos": ("blocks.{}.attn.hook_z", ("pos", "head"), lambda p, h: (p, h)),
    "pattern": ("blocks.{}.attn.hook_pattern", ("head",), lambda h: (h,)),  # [batch, head, q, k]
}


def parse_sites(sites: str | Sequence[str]) -> tuple[str, ...]:
    """Turn ``"resid_pre,z"`` (or a list) into a tuple of known site names.

    Raises:
        ConfigError: On an unknown site name, with a did-you-mean hint.
    """
    return parse_choices(sites, SITES, "patching site")


def site_shape(model: nn.Module, site: str, n_pos: int) -> tuple[int, ...]:
    """Shape of a site's effect tensor: ``[n_layers, ...]`` followed by its pos and/or head sizes."""
    sizes = {"pos": n_pos, "head": model.cfg.n_heads}
    return (model.cfg.n_layers, *(sizes[a] for a in SITES[site][1]))


def site_axes(site: str) -> tuple[str, ...]:
    """Axis names of a site's effect tensor, e.g. ``("layer", "pos")``."""
    return ("layer", *SITES[site][1])


def site_indices(model: nn.Module, site: str, n_pos: int) -> list[tuple[int, ...]]:
    """Every (layer, ...) index of a site, in row-major order of its effect tensor."""
    return list(itertools.product(*(range(n) for n in site_shape(model, site, n_pos))))


def hook_name(site: str, layer: int) -> str:
    """The hook a site patches at `layer`, e.g. ``hook_name("z", 1) == "blocks.1.attn.hook_z"``."""
    return SITES[site][0].format(layer)


def patch_interventions(
    model: nn.Module, site: str, source_cache: ActivationLookup, n_pos: int
) -> list[Intervention]:
    """One intervention per index of `site`, writing the source's activation there.

    Args:
        model: The hooked model (for `cfg.n_layers`, `cfg.n_heads`).
        site: A key of `SITES`.
        source_cache: Source activations by hook name, each [batch, ...].
        n_pos: Sequence length.

    Returns:
        Interventions in the row-major order of the site's effect tensor.
    """
    template, _, to_index = SITES[site]
    out = []
    for layer, *rest in site_indices(model, site, n_pos):
        index = to_index(*rest)
        source = source_cache[template.format(layer)]
        out.append(Intervention(template.format(layer), index, source[(_ALL, *index)]))
    return out


@dataclass(frozen=True)
class PatchPairs:
    """Source (clean) and target (corrupted) inputs, aligned example by example.

    Attributes:
        source_tokens: Inputs whose activations are patched in, [batch, pos].
        target_tokens: Inputs of the patched runs, [batch, pos].
        source_labels: Labels of the source inputs, [batch].
        target_labels: Labels of the target inputs, [batch].
    """

    source_tokens: Int[Tensor, "batch pos"]
    target_tokens: Int[Tensor, "batch pos"]
    source_labels: Int[Tensor, " batch"]
    target_labels: Int[Tensor, " batch"]

    def __post_init__(self) -> None:
        if self.source_tokens.shape != self.target_tokens.shape:
            raise ConfigError(
                f"paired inputs must have the same shape, got source {tuple(self.source_tokens.shape)} "
                f"and target {tuple(self.target_tokens.shape)}"
            )

    def __len__(self) -> int:
        return self.source_tokens.shape[0]

    def head(self, n: int) -> PatchPairs:
        """The first `n` pairs (all if `n` <= 0)."""
        return self if n <= 0 else self.rows(0, n)

    def rows(self, start: int, stop: int) -> PatchPairs:
        """Pairs ``start:stop``."""
        part = slice(start, stop)
        return PatchPairs(
            self.source_tokens[part],
            self.target_tokens[part],
            self.source_labels[part],
            self.target_labels[part],
        )


def aligned_pairs(source: Split, target: Split, keep: Tensor | None = None) -> PatchPairs:
    """Pairs of two splits aligned 1:1 (e.g. a split and its counterfactual partners).

    Args:
        source: The source split.
        target: The target split, row i paired with row i of `source`.
        keep: Optional bool mask [batch] of the pairs to keep (e.g. the partner's ``valid``).
    """
    if len(source) != len(target):
        raise ConfigError(
            f"aligned splits differ in size: {source.name!r} {len(source)}, {target.name!r} {len(target)}"
        )
    keep = torch.ones(len(source), dtype=torch.bool) if keep is None else keep.bool()
    return PatchPairs(source.tokens[keep], target.tokens[keep], source.labels[keep], target.labels[keep])


def cross_pairs(source: Split, target: Split, seed: int = 0) -> PatchPairs:
    """Pair the examples of two splits so that every pair's labels differ.

    Deterministic in `seed`: source rows are visited in a seeded random order; each takes the
    next unused target row (target rows in a seeded random order) among those whose label
    differs from its own, drawing from the label with the most unused target rows left (ties
    to the smaller label). Each row is used at most once; source rows left without a
    partner are dropped. With balanced labels, every source row finds a partner when the
    target is at least as large. (For MPSP ``val -> adv`` with m = 2, a pair then also shares
    its shortcut value: val rows carry shortcut = label, adv rows shortcut != label.)
    """
    rng = np.random.default_rng([seed, 0x9A17])
    src_order = rng.permutation(len(source))
    tgt_order = rng.permutation(len(target))
    tgt_labels = target.labels.numpy()[tgt_order]
    queues = {int(y): list(tgt_order[tgt_labels == y][::-1]) for y in np.unique(tgt_labels)}
    src_rows, tgt_rows = [], []
    for i in src_order:
        y = int(source.labels[i])
        options = [(-len(q), label) for label, q in queues.items() if label != y and q]
        if options:
            src_rows.append(int(i))
            tgt_rows.append(int(queues[min(options)[1]].pop()))
    s, t = torch.tensor(src_rows, dtype=torch.long), torch.tensor(tgt_rows, dtype=torch.long)
    return PatchPairs(source.tokens[s], target.tokens[t], source.labels[s], target.labels[t])


def example_logit_diff(
    logits: Float[Tensor, "... batch d_vocab_out"],
    source_labels: Int[Tensor, " batch"],
    target_labels: Int[Tensor, " batch"],
) -> Float[Tensor, "... batch"]:
    """``logit[i, y_source_i] - logit[i, y_target_i]`` of every example (readout logits)."""
    shape = (*logits.shape[:-1], 1)
    up = logits.gather(-1, source_labels.view(-1, 1).expand(shape))
    down = logits.gather(-1, target_labels.view(-1, 1).expand(shape))
    return (up - down).squeeze(-1)


def logit_diff(
    logits: Float[Tensor, "... batch d_vocab_out"],
    source_labels: Int[Tensor, " batch"],
    target_labels: Int[Tensor, " batch"],
) -> Float[Tensor, "..."]:
    """Mean over examples of ``logit[y_source] - logit[y_target]`` (readout logits)."""
    return example_logit_diff(logits, source_labels, target_labels).mean(-1)


def accuracy(
    logits: Float[Tensor, "... batch d_vocab_out"], labels: Int[Tensor, " batch"]
) -> Float[Tensor, "..."]:
    """Fraction of examples whose argmax readout logit is `labels`."""
    return (logits.argmax(-1) == labels).float().mean(-1)


def recovery(patched: Tensor, source: float, target: float) -> Tensor:
    """``(LD_patched - LD_target) / (LD_source - LD_target)``; NaN where the two runs tie."""
    denominator = source - target
    return (patched - target) / denominator if denominator != 0 else torch.full_like(patched, float("nan"))


@dataclass(frozen=True)
class SiteEffect:
    """Effect of patching every index of one site.

    Attributes:
        site: The site (a key of `SITES`).
        axes: Axis names of the tensors, e.g. ``("layer", "pos")``.
        logit_diff: Patched logit difference per index.
        recovery: Normalised logit-difference recovery per index.
        accuracy: Patched accuracy against the source labels per index.
        per_example: Patched logit difference of every pair, ``[*index shape, batch]`` (its mean
            over the last axis is `logit_diff`).
    """

    site: str
    axes: tuple[str, ...]
    logit_diff: Tensor
    recovery: Tensor
    accuracy: Tensor
    per_example: Tensor


@dataclass(frozen=True)
class PatchSweep:
    """Baselines of a pairing and the effect of patching each requested site.

    Attributes:
        source_logit_diff: LD of the unpatched source runs (the "clean" end).
        target_logit_diff: LD of the unpatched target runs (the "corrupted" end).
        source_accuracy: Accuracy of the source runs against the source labels.
        target_accuracy: Accuracy of the target runs against the source labels.
        effects: Per site.
        source_per_example: Logit difference of each unpatched source run, [batch].
        target_per_example: Logit difference of each unpatched target run, [batch].
    """

    source_logit_diff: float
    target_logit_diff: float
    source_accuracy: float
    target_accuracy: float
    effects: dict[str, SiteEffect]
    source_per_example: Tensor
    target_per_example: Tensor


def _changes(iv: Intervention, target: Tensor) -> Tensor:
    """Which examples a patch changes: bool [batch] (its value differs from the target's)."""
    return (target[(_ALL, *iv.index)] != iv.value).reshape(target.shape[0], -1).any(1)


@torch.no_grad()
def patch_sweep(
    model: nn.Module,
    pairs: PatchPairs,
    sites: str | Sequence[str] = ("resid_pre", "z"),
    max_rows: int = DEFAULT_MAX_ROWS,
) -> PatchSweep:
    """Patch source activations into target runs at every index of every site.

    One cached run on the sources and one on the targets (only the hooks needed), then
    batched patched runs (`run_interventions`) of the examples each patch changes.

    Args:
        model: A TransformerLens-style hooked model with `cfg.n_layers`, `cfg.n_heads`.
        pairs: Source and target inputs and labels, aligned.
        sites: Site names (see `SITES`), or a comma-separated string.
        max_rows: Most rows in one forward pass.

    Returns:
        Baselines and per-site effects (tensor layouts as in `SITES`).
    """
    sites = parse_sites(sites)
    n_pos = pairs.target_tokens.shape[1]
    hooks = {hook_name(s, layer) for s in sites for layer in range(model.cfg.n_layers)}
    source_logits, cache = cache_activations(model, pairs.source_tokens, sorted(hooks))
    target_logits, target_cache = cache_activations(model, pairs.target_tokens, sorted(hooks))
    source_logits, target_logits = source_logits[:, -1], target_logits[:, -1]
    labels = (pairs.source_labels, pairs.target_labels)
    source_each = example_logit_diff(source_logits, *labels)
    target_each = example_logit_diff(target_logits, *labels)
    ld_source, ld_target = source_each.mean().item(), target_each.mean().item()
    interventions = {s: patch_interventions(model, s, cache, n_pos) for s in sites}
    flat = [iv for s in sites for iv in interventions[s]]
    # A patch that writes what the target run already holds (e.g. an unedited position of a
    # counterfactual pair, before any edit can reach it) leaves that run as it is: skip it.
    active = [_changes(iv, target_cache[iv.hook]) for iv in flat]
    logits = run_interventions(model, pairs.target_tokens, flat, max_rows, active, target_logits)
    logits = logits.split([len(interventions[s]) for s in sites])
    effects = {}
    for site, site_logits in zip(sites, logits):
        shape = site_shape(model, site, n_pos)
        each = example_logit_diff(site_logits, *labels).reshape(*shape, -1)
        ld = each.mean(-1)
        acc = accuracy(site_logits, pairs.source_labels).reshape(shape)
        effects[site] = SiteEffect(site, site_axes(site), ld, recovery(ld, ld_source, ld_target), acc, each)
    return PatchSweep(
        ld_source,
        ld_target,
        accuracy(source_logits, pairs.source_labels).item(),
        accuracy(target_logits, pairs.source_labels).item(),
        effects,
        source_each,
        target_each,
    )
