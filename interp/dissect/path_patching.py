"""Path patching: the effect of a sender head on one receiver through the direct path between them.

Activation patching a head (`interp.dissect.patching`, site ``z``) measures everything its
output does downstream. Path patching isolates one edge of the computational graph: the
sender head's output takes its source (clean) value, but only as seen by one receiver, while
every other component (every other head, every MLP) keeps the output it has on the target
run. Receivers:

* ``logits``: the direct path to the unembedding. The final residual stream is the target's
  plus ``delta = (z_source - z_target)[sender] @ W_O[sender]`` (the sender's change of output),
  and the final LayerNorm is recomputed from it.
* ``L{layer}H{h}.q`` / ``.k`` / ``.v``: the query (key, value) input of a head in a later layer layer.
  First pass: that head's queries are recomputed from the target's residual stream at layer layer
  plus ``delta`` (through ``ln1``). Second pass: the model runs on the target input with only
  that head's queries replaced by the first pass's; everything after them is recomputed.

With every other component frozen, the receiver's input in the first pass is exactly the
target residual stream plus ``delta`` (the frozen outputs and all biases are the target
run's), so the first pass is a single write at ``blocks.{layer}.hook_resid_pre`` rather than a
hook on every other head and MLP; the oracle test checks this against the explicit two-pass
computation that freezes them all. The metric is the logit difference of `patching` (source
label minus target label at the readout), kept per pair.

References: Wang, Variengien, Conmy, Shlegeris and Steinhardt, "Interpretability in the Wild: a
Circuit for Indirect Object Identification in GPT-2 small" (2022); Goldowsky-Dill, MacLeod, Sato
and Arora, "Localizing Model Behavior with Path Patching" (2023).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from interp.config import parse_choices
from interp.dissect.hooks import cache_activations, checked_hooks
from interp.dissect.interventions import DEFAULT_MAX_ROWS, Intervention, run_interventions
from interp.dissect.patching import PatchPairs, example_logit_diff, recovery

RECEIVER_KINDS = ("q", "k", "v", "logits")
_ALL = slice(None)


@dataclass(frozen=True)
class PathEffects:
    """Path-patching effects of every sender head on every receiver.

    Attributes:
        senders: Sender heads, ``L{layer}H{h}`` in layer-major order.
        receivers: ``L{layer}H{h}.q|k|v`` (layer-major, then head, then kind) and/or ``logits``.
        logit_diff: Patched logit difference, [sender, receiver]; NaN where the receiver is not
            in a later layer than the sender (no path).
        recovery: Normalised recovery of `logit_diff`, [sender, receiver].
        per_example: Patched logit difference of every pair, [sender, receiver, batch].
        source_logit_diff: LD of the unpatched source runs.
        target_logit_diff: LD of the unpatched target runs.
        source_per_example: LD of each source run, [batch].
        target_per_example: LD of each target run, [batch].
    """

    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    logit_diff: Float[Tensor, "sender receiver"]
    recovery: Float[Tensor, "sender receiver"]
    per_example: Float[Tensor, "sender receiver batch"]
    source_logit_diff: float
    target_logit_diff: float
    source_per_example: Tensor
    target_per_example: Tensor


def receiver_names(model: nn.Module, kinds: Sequence[str]) -> list[tuple[str, int | None, int | None, str]]:
    """``(name, layer, head, kind)`` of every receiver of `kinds` (``logits`` last, layer None)."""
    heads = [k for k in kinds if k != "logits"]
    out = [
        (f"L{layer}H{h}.{k}", layer, h, k)
        for layer in range(model.cfg.n_layers)
        for h in range(model.cfg.n_heads)
        for k in heads
    ]
    return out + ([("logits", None, None, "logits")] if "logits" in kinds else [])


def _write(value: Tensor) -> Any:
    def hook(act: Tensor, hook: Any) -> Tensor:
        return value

    return hook


def _save(store: dict[str, Tensor], name: str) -> Any:
    def hook(act: Tensor, hook: Any) -> None:
        store[name] = act.detach()

    return hook


def _receiver_inputs(
    model: nn.Module, tokens: Tensor, layer: int, resid: Tensor, kinds: Sequence[str]
) -> dict:
    """Pass 1: the q/k/v of every head at `layer` when its residual input is `resid`."""
    store: dict[str, Tensor] = {}
    hooks = [(f"blocks.{layer}.hook_resid_pre", _write(resid))]
    hooks += [(f"blocks.{layer}.attn.hook_{k}", _save(store, k)) for k in kinds]
    with checked_hooks(model, hooks):
        model(tokens)
    return store


def _sender_runs(
    model: nn.Module,
    tokens: Tensor,
    delta: Tensor,
    layer: int,
    target: dict[str, Tensor],
    receivers: list[tuple[str, int | None, int | None, str]],
) -> list[tuple[int, Intervention]]:
    """The second-pass run of every receiver downstream of a sender in `layer` whose change of
    output is `delta` [batch, pos, d_model]: ``(receiver index, intervention)``.
    """
    runs = []
    kinds = list(dict.fromkeys(kind for _, _, _, kind in receivers if kind != "logits"))
    for layer_r in range(layer + 1, model.cfg.n_layers):
        if kinds:
            inputs = _receiver_inputs(
                model, tokens, layer_r, target[f"blocks.{layer_r}.hook_resid_pre"] + delta, kinds
            )
        for r, (_, l_r, h_r, kind) in enumerate(receivers):
            if l_r == layer_r:
                runs.append(
                    (r, Intervention(f"blocks.{l_r}.attn.hook_{kind}", (_ALL, h_r), inputs[kind][:, :, h_r]))
                )
    if receivers and receivers[-1][0] == "logits":
        last = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
        runs.append((len(receivers) - 1, Intervention(last, (), target[last] + delta)))
    return runs


@torch.no_grad()
def path_patch(
    model: nn.Module,
    pairs: PatchPairs,
    receivers: str | Sequence[str] = RECEIVER_KINDS,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> PathEffects:
    """Path-patch every head into every receiver of the kinds in `receivers`.

    Args:
        model: A TransformerLens-style hooked transformer (`cfg`, `W_O`, hook names).
        pairs: Source and target inputs and labels, aligned.
        receivers: Receiver kinds: ``q``, ``k``, ``v``, ``logits`` (comma-separated or a list).
        max_rows: Most rows in one forward pass of the second passes.

    Returns:
        The effect of every (sender, receiver) pair; NaN where there is no path.
    """
    cfg, tokens = model.cfg, pairs.target_tokens
    rec = receiver_names(model, parse_choices(receivers, RECEIVER_KINDS, "path-patching receiver"))
    z = [f"blocks.{layer}.attn.hook_z" for layer in range(cfg.n_layers)]
    resid = [f"blocks.{layer}.hook_resid_pre" for layer in range(cfg.n_layers)] + [
        f"blocks.{cfg.n_layers - 1}.hook_resid_post"
    ]
    source_logits, source = cache_activations(model, pairs.source_tokens, z)
    target_logits, target = cache_activations(model, tokens, z + resid)
    labels = (pairs.source_labels, pairs.target_labels)
    senders = [(layer, h) for layer in range(cfg.n_layers) for h in range(cfg.n_heads)]
    runs, where = [], []  # interventions, and the (sender, receiver) of each
    W_O = model.W_O
    for s, (layer, head) in enumerate(senders):
        delta = (source[z[layer]] - target[z[layer]])[:, :, head] @ W_O[layer, head]  # [batch, pos, d_model]
        for r, run in _sender_runs(model, tokens, delta, layer, target, rec):
            runs.append(run)
            where.append((s, r))
    per_example = torch.full((len(senders), len(rec), len(pairs)), torch.nan)
    for (s, r), run_logits in zip(where, run_interventions(model, tokens, runs, max_rows) if runs else []):
        per_example[s, r] = example_logit_diff(run_logits, *labels)
    source_each, target_each = (example_logit_diff(x[:, -1], *labels) for x in (source_logits, target_logits))
    ld, ld_source, ld_target = per_example.mean(-1), source_each.mean().item(), target_each.mean().item()
    return PathEffects(
        tuple(f"L{layer}H{h}" for layer, h in senders),
        tuple(name for name, *_ in rec),
        ld,
        recovery(ld, ld_source, ld_target),
        per_example,
        ld_source,
        ld_target,
        source_each,
        target_each,
    )
