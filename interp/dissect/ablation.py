"""Zero and mean ablation of every attention head and MLP (e.g. "ablation between splits").

Ablating a component replaces its output by a constant and measures how much the model's
accuracy and loss change. The components and what is replaced:

* head ``L{l}H{h}``: its slice of ``blocks.{l}.attn.hook_z`` [batch, pos, head, d_head], i.e.
  the head's output before `W_O`. Zeroing z removes exactly the head's write to the residual
  stream ``z_h @ W_O[h]`` (the shared bias `b_O` stays: it belongs to no head), which is what
  a model with `W_O[h]` set to zero computes.
* MLP ``L{l}MLP``: ``blocks.{l}.hook_mlp_out`` [batch, pos, d_model], the MLP's whole write to
  the residual stream, output bias included. We ablate this rather than ``mlp.hook_post`` so
  that zero ablation removes the MLP entirely (zeroing ``hook_post`` would still add
  `b_out`), and so that heads and MLPs are both ablated at their residual-stream interface
  (up to `W_O` for heads).

Zero ablation writes zeros. Mean ablation writes the mean activation over the examples of the
evaluated split, separately for each position (the position carries information that is the
same for every example: the readout token sits at the last one). Each ablation is one run per
component; the runs are batched by `interp.dissect.interventions.run_interventions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.config import parse_choices
from interp.dissect.hooks import cache_activations, has_mlps
from interp.dissect.interventions import DEFAULT_MAX_ROWS, Index, Intervention, run_interventions
from interp.metrics import per_example_loss

KINDS = ("zero", "mean")


@dataclass(frozen=True)
class Component:
    """One ablatable component.

    Attributes:
        name: ``"L{layer}H{head}"`` or ``"L{layer}MLP"``.
        layer: Its block.
        head: Its head, or None for an MLP.
        hook: The hook whose value is replaced.
        index: Index into that activation after the batch dimension.
    """

    name: str
    layer: int
    head: int | None
    hook: str
    index: Index


def components(model: nn.Module) -> list[Component]:
    """Every head, then the MLP, of each block in order (``L0H0, L0H1, L0MLP, L1H0, ...``)."""
    out = []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            out.append(
                Component(f"L{layer}H{head}", layer, head, f"blocks.{layer}.attn.hook_z", (slice(None), head))
            )
        if has_mlps(model):  # not in an attention-only TransformerLens model
            out.append(Component(f"L{layer}MLP", layer, None, f"blocks.{layer}.hook_mlp_out", ()))
    return out


def parse_kinds(kinds: str | Sequence[str]) -> tuple[str, ...]:
    """Turn ``"zero,mean"`` (or a list) into a tuple of ablation kinds.

    Raises:
        ConfigError: On an unknown kind, or none.
    """
    return parse_choices(kinds, KINDS, "ablation kind")


@torch.no_grad()
def ablation_interventions(
    model: nn.Module, tokens: Int[Tensor, "batch pos"], kind: str, comps: Sequence[Component] | None = None
) -> list[Intervention]:
    """The intervention that ablates each component (mean over `tokens` for ``"mean"``).

    Args:
        model: A TransformerLens-style hooked model.
        tokens: The examples the ablation is evaluated on (and, for mean, averaged over).
        kind: ``"zero"`` or ``"mean"``.
        comps: The components (default: `components(model)`).
    """
    comps = components(model) if comps is None else comps
    if kind == "zero":
        return [Intervention(c.hook, c.index, torch.zeros(())) for c in comps]
    hooks = {c.hook for c in comps}
    _, cache = cache_activations(model, tokens, sorted(hooks))
    means = {name: cache[name].mean(0, keepdim=True) for name in hooks}  # [1, pos, ...]
    return [Intervention(c.hook, c.index, means[c.hook][(slice(None), *c.index)]) for c in comps]


@dataclass(frozen=True)
class AblationEffect:
    """Accuracy and loss of the model with each component ablated, on one set of examples.

    Attributes:
        kinds: Ablation kinds, in the order of the first tensor axis.
        components: Component names, in the order of the second axis.
        accuracy: Ablated accuracy, [kind, component].
        loss: Ablated mean loss, [kind, component].
        base_accuracy: Accuracy of the unablated model.
        base_loss: Mean loss of the unablated model.
    """

    kinds: tuple[str, ...]
    components: tuple[str, ...]
    accuracy: Float[Tensor, "kind component"]
    loss: Float[Tensor, "kind component"]
    base_accuracy: float
    base_loss: float


@torch.no_grad()
def ablate(
    model: nn.Module,
    tokens: Int[Tensor, "batch pos"],
    labels: Int[Tensor, " batch"],
    kinds: str | Sequence[str] = KINDS,
    loss: str = "cross_entropy",
    max_rows: int = DEFAULT_MAX_ROWS,
) -> AblationEffect:
    """Ablate every head and MLP of `model`, one at a time, and score each run.

    Args:
        model: A TransformerLens-style hooked model with `cfg.n_layers`, `cfg.n_heads`.
        tokens: Examples [batch, pos]; mean ablation averages over them.
        labels: Labels read at the last position, [batch].
        kinds: Ablation kinds (``"zero"``, ``"mean"``), or a comma-separated string.
        loss: ``"cross_entropy"`` or ``"mse"`` (see `interp.metrics.per_example_loss`).
        max_rows: Most rows in one forward pass.

    Returns:
        Accuracy and loss per kind and component, and the unablated baseline.
    """
    kinds = parse_kinds(kinds)
    comps = components(model)
    interventions = [iv for kind in kinds for iv in ablation_interventions(model, tokens, kind, comps)]
    base = model(tokens)[:, -1]
    logits = run_interventions(
        model, tokens, interventions, max_rows, fallback=base
    )  # [kinds * comps, batch, out]
    shape = (len(kinds), len(comps))
    per_run_loss = per_example_loss(logits.flatten(0, 1), labels.repeat(len(interventions)), loss)
    return AblationEffect(
        kinds=kinds,
        components=tuple(c.name for c in comps),
        accuracy=(logits.argmax(-1) == labels).float().mean(-1).reshape(shape),
        loss=per_run_loss.view(len(interventions), -1).mean(-1).reshape(shape),
        base_accuracy=(base.argmax(-1) == labels).float().mean().item(),
        base_loss=per_example_loss(base, labels, loss).mean().item(),
    )
