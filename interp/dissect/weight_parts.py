"""Named parts of a model's weights, and their masks: what a restricted LLC samples.

A weight-restricted LLC (Wang et al. 2024, "Differentiation and specialization of attention
heads via the refined local learning coefficient") samples only part of the weights and holds
the rest at the checkpoint. The parts are named in TransformerLens's vocabulary:

* ``L{l}H{h}``: one attention head, i.e. its slices ``[h]`` of ``blocks.{l}.attn.W_Q``,
  ``W_K``, ``W_V``, ``W_O`` and of the biases ``b_Q``, ``b_K``, ``b_V`` (``b_O`` is shared by
  the layer's heads, so no head owns it); ``L{l}H{h}.W_Q`` one of those slices;
* ``blocks.{l}``, ``blocks.{l}.attn``, ``blocks.{l}.mlp``, ``blocks.{l}.ln1``, ``blocks.{l}.ln2``:
  a block or one of its modules (every parameter under it), ``blocks.{l}.attn.W_Q`` one
  parameter;
* ``embed``, ``pos_embed``, ``unembed``, ``ln_final`` (and ``embed.W_E``, ``unembed.b_U``, ...);
* the quadratic MLP's parameters: ``W_E_left``, ``W_E_right``, ``W_U``.

Several parts join with commas (``L0H0,L0H1``). This module checks a name's *form* without
torch, so the CLI refuses a typo before the heavy imports; the layer and head ranges are
checked against the loaded model (`restrict_masks`). On a model outside this vocabulary (a
plain MLP in a notebook), `parse_restrict(..., strict=False)` passes other names through as
parameter names or module prefixes of ``model.named_parameters()``.

A head's weights are slices of stacked ``[n_heads, ...]`` tensors, so a part is a mask over a
parameter, not a whole parameter: the sampler multiplies each step by it, and the entries
outside it stay at the checkpoint's values. Whole parameters (a module, the embeddings) get no
mask, and parameters no part touches are not sampled (nor differentiated). Importing this
module imports no torch (`restrict_masks` does, when called).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interp.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from torch import Tensor, nn

HEAD_MATRICES = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")
"""A head's parameters: slices ``[h]`` of the layer's stacked ``[n_heads, ...]`` tensors."""

MODULE_PARAMETERS = {
    "attn": (*HEAD_MATRICES, "b_O"),
    "mlp": ("W_in", "b_in", "W_out", "b_out"),
    "ln1": ("w", "b"),
    "ln2": ("w", "b"),
    "embed": ("W_E",),
    "pos_embed": ("W_pos",),
    "unembed": ("W_U", "b_U"),
    "ln_final": ("w", "b"),
}
"""TransformerLens's module names and the parameters each holds."""

TOP_PARAMETERS = ("W_E_left", "W_E_right", "W_U")
"""Parameters at the top of a model (the quadratic MLP)."""

_HEAD = re.compile(r"L(\d+)H(\d+)(?:\.(\w+))?")
_BLOCK = re.compile(r"blocks\.(\d+)(?:\.(\w+)(?:\.(\w+))?)?")
_TOP = re.compile(r"(\w+)(?:\.(\w+))?")
FORMS = "L{l}H{h}[.W_Q|W_K|W_V|W_O|b_Q|b_K|b_V], blocks.{l}[.attn|mlp|ln1|ln2[.PARAM]], " + ", ".join(
    [*(m for m in MODULE_PARAMETERS if m not in ("attn", "mlp", "ln1", "ln2")), *TOP_PARAMETERS]
)


@dataclass(frozen=True)
class Part:
    """One named part of a model.

    Attributes:
        text: The name as given.
        prefix: The parameter name (or module prefix ending in ``.``) it covers.
        layer: The block it is in, if any (checked against the model's layers).
        head: The head, for a head's slices (checked against the model's heads).
        names: The full parameter names it covers (empty: every one under `prefix`).
    """

    text: str
    prefix: str
    layer: int | None = None
    head: int | None = None
    names: tuple[str, ...] = ()


def parse_restrict(text: str, *, strict: bool = True) -> tuple[Part, ...]:
    """The parts a `restrict` string names; ``""`` names none (the whole model is sampled).

    Args:
        text: Comma-separated names (see the module docstring).
        strict: Refuse names outside TransformerLens's vocabulary; else pass them through as a
            parameter name or module prefix, checked when the model is at hand.

    Raises:
        ConfigError: On a name of no valid form, naming it and listing the forms.
    """
    names = [t.strip() for t in text.split(",")] if text.strip() else []
    parts = []
    for name in names:
        part = _parse_one(name)
        if part is None:
            if strict or not re.fullmatch(r"[\w.]+", name):
                raise ConfigError(f"restrict {name!r} names no part of a model", f"valid forms: {FORMS}")
            part = Part(name, name)
        parts.append(part)
    if len({p.text for p in parts}) < len(parts):
        raise ConfigError(f"restrict {text!r} names a part twice", "name each part once")
    return tuple(parts)


def _parse_one(name: str) -> Part | None:
    """One name in TransformerLens's vocabulary, or None if it has no such form."""
    if match := _HEAD.fullmatch(name):
        layer, head, matrix = int(match[1]), int(match[2]), match[3]
        if matrix is not None and matrix not in HEAD_MATRICES:
            raise ConfigError(
                f"restrict {name!r}: a head has no {matrix!r}", did_you_mean(matrix, HEAD_MATRICES)
            )
        matrices = (matrix,) if matrix else HEAD_MATRICES
        return Part(
            name, f"blocks.{layer}.attn.", layer, head, tuple(f"blocks.{layer}.attn.{m}" for m in matrices)
        )
    if match := _BLOCK.fullmatch(name):
        layer, module, parameter = int(match[1]), match[2], match[3]
        if module is None:
            return Part(name, f"blocks.{layer}.", layer)
        valid = ["attn", "mlp", "ln1", "ln2"]
        if module not in valid:
            raise ConfigError(f"restrict {name!r}: a block has no {module!r}", did_you_mean(module, valid))
        return _module_part(name, f"blocks.{layer}.{module}", module, parameter, layer)
    if (match := _TOP.fullmatch(name)) and match[1] in MODULE_PARAMETERS and match[1] not in ("attn", "mlp"):
        return _module_part(name, match[1], match[1], match[2], None)
    if name in TOP_PARAMETERS:
        return Part(name, name, names=(name,))
    return None


def _module_part(name: str, path: str, module: str, parameter: str | None, layer: int | None) -> Part:
    """The part of a module, or of one of its parameters (checked against TransformerLens's names)."""
    if parameter is None:
        return Part(name, path + ".", layer)
    valid = MODULE_PARAMETERS[module]
    if parameter not in valid:
        raise ConfigError(f"restrict {name!r}: {module} has no {parameter!r}", did_you_mean(parameter, valid))
    return Part(name, f"{path}.{parameter}", layer, names=(f"{path}.{parameter}",))


def restrict_masks(model: nn.Module, restrict: str | Sequence[str] | None) -> dict[str, Tensor | None]:
    """The parameters `restrict` samples, each with its mask (None: the whole parameter).

    Args:
        model: Any module; names follow ``model.named_parameters()`` (TransformerLens's on our
            models and on a `HookedTransformer`).
        restrict: Comma-separated names, a list of names, or None / ``""`` for every parameter.

    Returns:
        ``{parameter name: mask or None}`` in name order; a mask has the parameter's shape and
        dtype, 1 where sampled and 0 where held. Name order, not the order the model registered
        its parameters, is the order the sampler draws its noise in: a `HookedTransformer` and
        ours holding the same weights (their registration orders differ) get the same noise.

    Raises:
        ConfigError: If a layer or head is out of the model's range, or a name covers no
            parameter of the model (naming it and what is valid).
    """
    import torch

    params = dict(model.named_parameters())
    text = ",".join(restrict) if isinstance(restrict, (list, tuple)) else (restrict or "")
    parts = parse_restrict(text, strict=False)
    if not parts:
        return {name: None for name in sorted(params)}
    masks: dict[str, Tensor | None] = {}
    for part in parts:
        _check_layer(model, part, params)
        for name in _covered(part, params):
            if part.head is None:
                masks[name] = None
                continue
            mask = masks.get(name, torch.zeros_like(params[name]))
            if mask is not None:
                _check_head(part, params[name])
                mask[part.head] = 1
                masks[name] = mask
    return dict(sorted(masks.items()))


def _covered(part: Part, params: dict[str, Tensor]) -> list[str]:
    """The model's parameter names `part` covers (at least one)."""
    names = (
        [n for n in part.names if n in params]
        if part.names
        else [n for n in params if n.startswith(part.prefix)]
    )
    if not names and not part.names and part.prefix in params:
        names = [part.prefix]  # a plain parameter name given without strict parsing
    if not names:
        wanted = part.names[0] if part.names else part.prefix
        raise ConfigError(
            f"restrict {part.text!r} covers no parameter of this model",
            did_you_mean(wanted.rstrip("."), _modules(params)),
        )
    return names


def _modules(params: dict[str, Tensor]) -> set[str]:
    """Every parameter name and every module prefix of them (what a name may be)."""
    out = set(params)
    for name in params:
        pieces = name.split(".")
        out |= {".".join(pieces[:i]) for i in range(1, len(pieces))}
    return out


def _check_layer(model: nn.Module, part: Part, params: dict[str, Tensor]) -> None:
    """Refuse a layer beyond the model's blocks."""
    if part.layer is None:
        return
    layers = sorted({int(n.split(".")[1]) for n in params if n.startswith("blocks.")})
    if part.layer not in layers:
        valid = f"layers 0-{layers[-1]}" if layers else "no blocks"
        raise ConfigError(
            f"restrict {part.text!r}: layer {part.layer} is out of range", f"this model has {valid}"
        )


def _check_head(part: Part, param: Tensor) -> None:
    """Refuse a head beyond the layer's heads (the first axis of a stacked attention tensor)."""
    if part.head >= param.shape[0]:
        raise ConfigError(
            f"restrict {part.text!r}: head {part.head} is out of range",
            f"layer {part.layer} has heads 0-{param.shape[0] - 1}",
        )
