"""Conversion between our `Transformer` and TransformerLens 3.x's `HookedTransformer`.

Our module tree and parameter names are TransformerLens's, so a state dict converts by
dropping TransformerLens's non-parameter buffers (`attn.IGNORE`, `attn.mask`). The configs
convert field by field; TransformerLens features our model does not implement (rotary
embeddings, folded LayerNorm, attention-only blocks, ...) are refused with a clear error
rather than silently approximated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from interp.errors import ConfigError
from interp.store.checkpoint import load_state_into
from models.config import TransformerConfig
from models.transformer import Transformer

if TYPE_CHECKING:
    from transformer_lens import HookedTransformer, HookedTransformerConfig

_SHARED_FIELDS = (
    "n_layers",
    "n_heads",
    "d_model",
    "d_mlp",
    "n_ctx",
    "d_vocab",
    "d_vocab_out",
    "d_head",
    "normalization_type",
    "positional_embedding_type",
    "attention_dir",
    "act_fn",
    "use_attn_result",
    "use_split_qkv_input",
    "use_hook_mlp_in",
    "eps",
)
# TransformerLens settings that must hold for the conversion to be exact.
_REQUIRED_TL = {
    "attn_only": False,
    "parallel_attn_mlp": False,
    "gated_mlp": False,
    "final_rms": False,
    "use_attn_scale": True,
    "attn_scores_soft_cap": -1.0,
    "output_logits_soft_cap": -1.0,
}
_TL_BUFFERS = ("IGNORE", "mask")


def _transformer_lens_3(name: str) -> type:
    """Import `name` from TransformerLens 3.x, or explain that 4.x removed it."""
    import transformer_lens

    try:
        return getattr(transformer_lens, name)
    except (ImportError, AttributeError):
        from importlib.metadata import version

        raise ConfigError(
            f"transformer_lens.{name} is not available in transformer-lens {version('transformer-lens')}",
            "conversion to a HookedTransformer needs transformer-lens 3.x (pip install 'transformer-lens>=3.9,<4')",
        ) from None


def to_transformer_lens_config(cfg: TransformerConfig) -> HookedTransformerConfig:
    """Return the `HookedTransformerConfig` of the same architecture.

    Raises:
        ConfigError: For a model without positional embeddings (TransformerLens always has some).
    """
    if cfg.positional_embedding_type != "standard":
        raise ConfigError(
            f"positional_embedding_type={cfg.positional_embedding_type!r} has no TransformerLens equivalent",
            "only 'standard' (learned W_pos) converts",
        )
    HookedTransformerConfig = _transformer_lens_3("HookedTransformerConfig")
    fields = {name: getattr(cfg, name) for name in _SHARED_FIELDS}
    return HookedTransformerConfig(**fields, initializer_range=cfg.init_range, default_prepend_bos=False)


def from_transformer_lens_config(tl_cfg: HookedTransformerConfig) -> TransformerConfig:
    """Return our config for a TransformerLens config, refusing features we do not implement.

    Raises:
        ConfigError: Naming the first unsupported TransformerLens setting.
    """
    for name, needed in _REQUIRED_TL.items():
        value = getattr(tl_cfg, name, needed)
        if value != needed:
            raise ConfigError(
                f"TransformerLens setting {name}={value!r} is not supported", f"need {needed!r}"
            )
    fields: dict[str, Any] = {name: getattr(tl_cfg, name) for name in _SHARED_FIELDS}
    if fields["normalization_type"] not in ("LN", None):
        raise ConfigError(
            f"TransformerLens normalization_type={fields['normalization_type']!r} is not supported",
            "need 'LN' or None; load weights without fold_ln / processing",
        )
    return TransformerConfig(**fields, init_range=tl_cfg.initializer_range)


def from_transformer_lens_config_dict(data: Mapping[str, Any]) -> TransformerConfig:
    """Our config for a TransformerLens config *dict* (`HookedTransformerConfig.to_dict()`, or a
    `config.json` holding one), refusing features we do not implement.

    A ``dtype`` given as a string (``"torch.float32"``, as JSON stores it) is read as that torch dtype.

    Raises:
        ConfigError: On a key TransformerLens does not know, or an unsupported setting.
    """
    import torch

    fields = dict(data)
    if isinstance(fields.get("dtype"), str):
        dtype = getattr(torch, fields["dtype"].removeprefix("torch."), None)
        if not isinstance(dtype, torch.dtype):
            raise ConfigError(
                f"TransformerLens config dtype={data['dtype']!r} is not a torch dtype", "e.g. torch.float32"
            )
        fields["dtype"] = dtype
    HookedTransformerConfig = _transformer_lens_3("HookedTransformerConfig")
    try:
        tl_cfg = HookedTransformerConfig.from_dict(fields)
    except (TypeError, ValueError, AssertionError) as err:
        raise ConfigError(
            f"not a TransformerLens config: {err}", "pass HookedTransformerConfig.to_dict()"
        ) from None
    return from_transformer_lens_config(tl_cfg)


def from_transformer_lens_state_dict(state_dict: dict[str, Tensor], cfg: TransformerConfig) -> Transformer:
    """Build our `Transformer` from a TransformerLens `HookedTransformer` state dict.

    Raises:
        CheckpointError: If a parameter is missing, unexpected, or of the wrong shape.
    """
    model = Transformer(cfg)
    params = {k: v for k, v in state_dict.items() if k.rsplit(".", 1)[-1] not in _TL_BUFFERS}
    load_state_into(model, params, where="TransformerLens state dict")
    return model


def from_transformer_lens(tl_model: HookedTransformer) -> Transformer:
    """Convert a TransformerLens `HookedTransformer` (same weights, same function)."""
    cfg = from_transformer_lens_config(tl_model.cfg)
    return from_transformer_lens_state_dict(tl_model.state_dict(), cfg)


def to_transformer_lens(model: Transformer) -> HookedTransformer:
    """Return a TransformerLens `HookedTransformer` with the same weights (on the CPU)."""
    HookedTransformer = _transformer_lens_3("HookedTransformer")
    tl_model = HookedTransformer(to_transformer_lens_config(model.cfg))
    missing, unexpected = tl_model.load_state_dict(model.state_dict(), strict=False)
    if unexpected or any(k.rsplit(".", 1)[-1] not in _TL_BUFFERS for k in missing):
        raise ConfigError(
            f"state dict does not fit TransformerLens: missing {missing}, unexpected {unexpected}"
        )
    return tl_model
