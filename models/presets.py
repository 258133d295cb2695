"""Named model presets of the three studies.

A preset fixes the architecture; the vocabulary sizes and context length come from the task
(anything with `d_vocab`, `d_vocab_out` and `n_ctx`, see `interp.splits.Task`), so one preset
serves every task of its study.

* ``mpsp-1l1h``, ``mpsp-1l2h``, ``mpsp-2l1h``, ``mpsp-2l2h`` (study A): d_model 64, d_mlp 128,
  LayerNorm, learned positions, causal, ReLU;
* ``modadd-1l`` (study B): 1 layer, d_model 128, 4 heads of 32, d_mlp 512, ReLU, no LayerNorm;
* ``quadratic-mlp`` (study C): ``(U e_m + V e_n)^2``, width 500, no biases, init std ``(16 N)^(-1/3)``.

Other packages add presets by an ``interp.presets`` entry point holding an `interp.plugins.Preset`
(a notebook: `register_preset`); `preset_config` resolves both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interp.errors import ConfigError, PluginError, did_you_mean
from interp.plugins import Plugin, Preset, available, find, register
from models.config import MODEL_CONFIGS, QuadraticMLPConfig, TransformerConfig

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
        name: A key of `PRESETS`, or a plugin's preset (`plugin_preset`).
        task: Supplies `d_vocab`, `d_vocab_out` and (for transformers) `n_ctx`.
        **overrides: Config fields to change (e.g. ``n_heads=4``).

    Raises:
        ConfigError: If `name` is not a preset or an override is not a config field.
        PluginError: If the preset's plugin fails to import or holds no `interp.plugins.Preset`.
    """
    if name in PRESETS:
        cls, fields = PRESETS[name]
    else:
        cls, fields = _plugin_fields(plugin_preset(name)[0])
    sizes = dict(d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out)
    if cls is TransformerConfig:
        sizes["n_ctx"] = task.n_ctx
    try:
        return cls(**{**fields, **sizes, **overrides})
    except TypeError as err:  # an override that is not a field
        raise ConfigError(f"bad override for preset {name!r}: {err}") from None


def plugin_preset(name: str) -> tuple[Preset, Plugin]:
    """A plugin's preset `name` (``interp.presets`` entry point, or `register_preset`) and its origin.

    Raises:
        ConfigError: If no preset has that name (built-in or plugin; the valid ones listed).
        PluginError: If its plugin fails to import or holds no `interp.plugins.Preset`.
    """
    found = find(_GROUP, name, PRESETS, _not_a_preset)
    if found is None:
        raise ConfigError(f"unknown preset {name!r}", did_you_mean(name, preset_names()))
    return found


def preset_names() -> list[str]:
    """The built-in presets, then the plugins' (none imported)."""
    return [*PRESETS, *available(_GROUP, PRESETS)]


def register_preset(name: str, preset: Preset) -> Preset:
    """Make `preset` usable as `name` in this process (``interp.training`` from a notebook).

    Raises:
        PluginError: If it is not a `Preset`, or `name` is a built-in's or an installed plugin's.
    """
    problem = _not_a_preset(preset)
    if problem:
        raise PluginError(f"register_preset({name!r}): the object {problem}")
    register(_GROUP, name, preset, PRESETS)
    return preset


def _plugin_fields(preset: Preset) -> tuple[type, dict[str, Any]]:
    fields = dict(preset.model)
    kind = fields.pop("kind", None)
    if kind not in MODEL_CONFIGS:
        raise ConfigError(
            f"a plugin preset's model kind {kind!r} is unknown", did_you_mean(str(kind), MODEL_CONFIGS)
        )
    return MODEL_CONFIGS[kind], fields


def _not_a_preset(obj: object) -> str | None:
    if not isinstance(obj, Preset):
        return f"is a {type(obj).__name__}, not an interp.plugins.Preset"
    if obj.model.get("kind") not in MODEL_CONFIGS:
        return f"has model kind {obj.model.get('kind')!r}; valid: {', '.join(MODEL_CONFIGS)}"
    return None


_GROUP = "interp.presets"
