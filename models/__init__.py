"""Model architectures of `interp`, as TransformerLens-compatible hooked modules.

* `Transformer` (`models.transformer`): studies A and B.
* `QuadraticMLP` (`models.quadratic_mlp`): study C.
* `preset_config` (`models.presets`): the named architectures of the studies.
* `models.convert`: to and from TransformerLens 3.x `HookedTransformer`.

A model config is stored in a run's `config.json` as a dict with a ``kind`` key;
`config_from_dict` / `config_to_dict` (`models.config`, no torch) and `build_model` /
`load_model` (`models.build`) work from that. Names load their module on first use.
"""

from interp.lazy import lazy_surface

_NAMES = {
    **{
        name: "models.config"
        for name in (
            "ModelConfig",
            "MODEL_CONFIGS",
            "QuadraticMLPConfig",
            "TransformerConfig",
            "config_from_dict",
            "config_to_dict",
        )
    },
    **{name: "models.build" for name in ("MODELS", "build_model", "load_model", "model_from_checkpoint")},
    **{
        name: "models.presets"
        for name in ("PRESETS", "plugin_preset", "preset_config", "preset_names", "register_preset")
    },
    "QuadraticMLP": "models.quadratic_mlp",
    "Transformer": "models.transformer",
}
__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_surface(__name__, _NAMES)
