"""Named model presets of the three studies.

A preset fixes the architecture; the vocabulary sizes and context length come from the task
(anything with `d_vocab`, `d_vocab_out` and `n_ctx`, see `interp.splits.Task`), so one preset
serves every task of its study.

* ``mpsp-1l1h``, ``mpsp-1l2h``, ``mpsp-2l1h``, ``mpsp-2l2h`` (study A): d_model 64, d_mlp 128,
  LayerNorm, learned positions, causal, ReLU;
* ``modadd-1l`` (study B): 1 layer, d_model 128, 4 heads of 32, d_mlp 512, ReLU, no LayerNorm;
* ``quadratic-mlp`` (study C): ``(U e_m + V e_n)^2``, width 500, no biases, init std ``(16 N)^(-1/3)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interp.errors import ConfigError, did_you_mean
from models.config import QuadraticMLPConfig, TransformerConfig

if TYPE_CHECKING:
    from interp.splits import Task

_MPSP = dict(d_model=64, d_mlp=128, normalization_type="LN", act_fn="relu", attention_dir="causal")

PRESETS: dict[str, tuple[type, dict[str, Any]]] = {
    "mpsp-1l1h": (TransformerConfig, dict(_MPSP, n_layers=1, n_heads=1)),
    "mpsp-1l2h": (TransformerConfig, dict(_MPSP, n_layers=1, n_heads=2)),
    "mpsp-2l1h": (TransformerConfig, dict(_MPSP, n_layers=2, n_heads=1)),
    "mpsp-2l2h": (TransformerConfig, dict(_MPSP, n_layers=2, n_heads=2)),
    "modadd-1l": (
        TransformerConfig,
        dict(
            n_layers=1, n_heads=4, d_model=128, d_head=32, d_mlp=512, normalization_type=None, act_fn="relu"
        ),
    ),
    "quadratic-mlp": (QuadraticMLPConfig, dict(d_hidden=500)),
}


def preset_config(name: str, task: Task, **overrides: Any) -> TransformerConfig | QuadraticMLPConfig:
    """Return the config of preset `name` sized for `task`.

    Args:
        name: A key of `PRESETS`.
        task: Supplies `d_vocab`, `d_vocab_out` and (for transformers) `n_ctx`.
        **overrides: Config fields to change (e.g. ``n_heads=4``).

    Raises:
        ConfigError: If `name` is not a preset or an override is not a config field.
    """
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}", did_you_mean(name, PRESETS))
    cls, fields = PRESETS[name]
    sizes = dict(d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out)
    if cls is TransformerConfig:
        sizes["n_ctx"] = task.n_ctx
    try:
        return cls(**{**fields, **sizes, **overrides})
    except TypeError as err:  # an override that is not a field
        raise ConfigError(f"bad override for preset {name!r}: {err}") from None
