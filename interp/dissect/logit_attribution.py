"""Direct logit attribution: each component's direct contribution to the label-contrast logit.

At the readout (last) position the final residual stream is a sum of what each component wrote
into it: the token and position embeddings, every head's output (its z times its rows of
`W_O`), every MLP's output (or, split further, every neuron's activation times its row of
`W_out`), and the output biases (`b_O`, plus `b_out` when neurons are split out). The logits
are ``ln_final(resid) @ W_U + b_U``. Holding the final LayerNorm's scale at its value on the run
(`ln_final.hook_scale`, the norm of the centred residual stream, as TransformerLens's
`ActivationCache.apply_ln_to_stack` does), `ln_final` is linear in each part, so the
label-contrast logit difference

    LD_i = logit[i, y_i] - mean over c != y_i of logit[i, c]

(with two classes: the true label's logit minus the other's) splits exactly into one term per
component, ``centre(x) / scale . (w * d_i)`` with ``d_i = W_U[:, y_i] - mean_{c != y_i} W_U[:, c]``
and ``w`` the LayerNorm weight, plus a constant from the LayerNorm's bias and `b_U`
(``unembed_bias``). The terms are TransformerLens's `logit_attrs` on a model whose final
LayerNorm weight is folded into `W_U` (`fold_ln`), which the oracle test checks; their sum is
the model's logit difference, which it checks too. Without LayerNorm the terms are ``x . d_i``.

References: Elhage et al., "A Mathematical Framework for Transformer Circuits" (2021); Wang,
Variengien, Conmy, Shlegeris and Steinhardt, "Interpretability in the Wild" (2022).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.dissect.hooks import cache_activations, has_mlps

DEFAULT_CHUNK = 2048  # examples per forward pass (neuron terms are [chunk, d_mlp] per layer)


@dataclass(frozen=True)
class LogitAttribution:
    """Direct contributions to the label-contrast logit difference, per example.

    Attributes:
        components: ``embed``, ``pos_embed``, then per layer ``L{l}H{h}`` heads and ``L{l}MLP``
            (or ``L{l}N{n}`` neurons), then ``bias`` (the summed output biases) and
            ``unembed_bias`` (final LayerNorm bias and `b_U`).
        per_example: Each component's term, [component, batch]; the terms sum to `logit_diff`.
        logit_diff: The model's label-contrast logit difference, [batch].
    """

    components: tuple[str, ...]
    per_example: Float[Tensor, "component batch"]
    logit_diff: Float[Tensor, " batch"]


def contrast(
    weights: Float[Tensor, "... d_vocab_out"], labels: Int[Tensor, " batch"]
) -> Float[Tensor, "batch ..."]:
    """``weights[..., y] - mean over c != y of weights[..., c]`` for every label y (the class axis last).

    Applied to `W_U` [d_model, d_vocab_out] it gives each example's contrast direction
    [batch, d_model]; to logits [batch, d_vocab_out] (one label per row), use `contrast_logits`.
    """
    n = weights.shape[-1]
    true = weights[..., labels].movedim(-1, 0)
    return true - (weights.sum(-1) - true) / (n - 1)


def contrast_logits(
    logits: Float[Tensor, "batch d_vocab_out"], labels: Int[Tensor, " batch"]
) -> Float[Tensor, " batch"]:
    """``logit[i, y_i] - mean over c != y_i of logit[i, c]``."""
    true = logits.gather(1, labels[:, None]).squeeze(1)
    return true - (logits.sum(1) - true) / (logits.shape[1] - 1)


def component_names(model: nn.Module, neurons: bool = False) -> tuple[str, ...]:
    """The components of `direct_logit_attribution`, in order."""
    cfg = model.cfg
    names = ["embed"] + (["pos_embed"] if cfg.positional_embedding_type == "standard" else [])
    for layer in range(cfg.n_layers):
        names += [f"L{layer}H{h}" for h in range(cfg.n_heads)]
        if has_mlps(model):  # an attention-only TransformerLens model has none
            names += [f"L{layer}N{n}" for n in range(cfg.d_mlp)] if neurons else [f"L{layer}MLP"]
    return tuple(names + ["bias", "unembed_bias"])


def _hooks(model: nn.Module, neurons: bool) -> list[str]:
    cfg = model.cfg
    names = ["hook_embed"] + (["hook_pos_embed"] if cfg.positional_embedding_type == "standard" else [])
    for layer in range(cfg.n_layers):
        names.append(f"blocks.{layer}.attn.hook_z")
        if has_mlps(model):
            names.append(f"blocks.{layer}.mlp.hook_post" if neurons else f"blocks.{layer}.hook_mlp_out")
    return names + (["ln_final.hook_scale"] if cfg.normalization_type == "LN" else [])


def _project(
    x: Float[Tensor, "batch k d_model"], v: Float[Tensor, "batch d_model"], scale: Tensor | None
) -> Tensor:
    """``centre(x) / scale . v`` for every row of `x` (no centring or scale without LayerNorm)."""
    dot = torch.einsum("bkd,bd->bk", x, v)
    if scale is None:
        return dot
    return (dot - x.mean(-1) * v.sum(-1, keepdim=True)) / scale


def _chunk_terms(model: nn.Module, tokens: Tensor, labels: Tensor, neurons: bool) -> tuple[Tensor, Tensor]:
    """The terms [batch, component] and the model's contrast logit difference [batch] of one chunk."""
    cfg = model.cfg
    logits, cache = cache_activations(model, tokens, _hooks(model, neurons))
    at = {name: act[:, -1] for name, act in cache.items()}  # the readout position
    ln = cfg.normalization_type == "LN"
    scale = at["ln_final.hook_scale"] if ln else None  # [batch, 1]
    d = contrast(model.W_U, labels)  # [batch, d_model]
    v = d * model.ln_final.w if ln else d
    vectors = [at["hook_embed"]] + ([at["hook_pos_embed"]] if "hook_pos_embed" in at else [])
    terms = [_project(torch.stack(vectors, 1), v, scale)]
    bias = torch.zeros(cfg.d_model)
    for layer, block in enumerate(model.blocks):
        heads = torch.einsum("bhe,hed->bhd", at[f"blocks.{layer}.attn.hook_z"], block.attn.W_O)
        terms.append(_project(heads, v, scale))
        bias = bias + block.attn.b_O + (block.mlp.b_out if neurons and has_mlps(model) else 0)
        if not has_mlps(model):
            continue
        if neurons:  # each neuron writes a_n W_out[n]: project W_out once, then scale by a_n
            w_out = block.mlp.W_out
            lin = v @ w_out.T - (w_out.mean(-1)[None] * v.sum(-1, keepdim=True) if ln else 0)
            terms.append(at[f"blocks.{layer}.mlp.hook_post"] * lin / (scale if ln else 1))
        else:
            terms.append(_project(at[f"blocks.{layer}.hook_mlp_out"][:, None], v, scale))
    terms.append(_project(bias.expand(len(tokens), 1, -1), v, scale))
    constant = contrast(model.b_U, labels) + (d @ model.ln_final.b if ln else 0)
    terms.append(constant[:, None])
    return torch.cat(terms, 1), contrast_logits(logits[:, -1], labels)


@torch.no_grad()
def direct_logit_attribution(
    model: nn.Module,
    tokens: Int[Tensor, "batch pos"],
    labels: Int[Tensor, " batch"],
    *,
    neurons: bool = False,
    chunk: int = DEFAULT_CHUNK,
) -> LogitAttribution:
    """Every component's direct term of the label-contrast logit difference (module docstring).

    Args:
        model: A TransformerLens-style hooked transformer (LayerNorm ``"LN"`` or none).
        tokens: Inputs [batch, pos]; the readout is the last position.
        labels: The class each example's contrast favours, [batch] (usually its label).
        neurons: Split each MLP into its neurons (``L{l}N{n}``, ``d_mlp`` terms per layer).
        chunk: Examples per forward pass.

    Returns:
        The terms per component and example, and the model's logit difference they sum to.
    """
    parts = [
        _chunk_terms(model, tokens[i : i + chunk], labels[i : i + chunk], neurons)
        for i in range(0, len(tokens), chunk)
    ]
    terms = torch.cat([t for t, _ in parts]).T
    return LogitAttribution(component_names(model, neurons), terms, torch.cat([ld for _, ld in parts]))
