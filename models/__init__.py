"""Model architectures of `interp`, as TransformerLens-compatible hooked modules.

* `Transformer` (`models.transformer`): studies A and B.
* `QuadraticMLP` (`models.quadratic_mlp`): study C.
* `preset_config` (`models.presets`): the named architectures of the studies.
* `models.convert`: to and from TransformerLens 3.x `HookedTransformer`.

A model config is stored in a run's `config.json` as a dict with a ``kind`` key;
`config_from_dict` / `config_to_dict` / `build_model` / `load_model` work from that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from interp.store.checkpoint import Checkpoint, load_checkpoint, load_state_into
from interp.config import from_dict, to_dict
from interp.errors import ConfigError, did_you_mean
from models.config import QuadraticMLPConfig, TransformerConfig
from models.presets import PRESETS, preset_config
from models.quadratic_mlp import QuadraticMLP
from models.transformer import Transformer

ModelConfig = TransformerConfig | QuadraticMLPConfig

MODELS: dict[str, tuple[type, type[nn.Module]]] = {
    TransformerConfig.kind: (TransformerConfig, Transformer),
    QuadraticMLPConfig.kind: (QuadraticMLPConfig, QuadraticMLP),
}


def config_to_dict(cfg: ModelConfig) -> dict[str, Any]:
    """Return a JSON-ready dict of a model config, with its ``kind``."""
    return {"kind": cfg.kind, **to_dict(cfg)}


def config_from_dict(data: dict[str, Any], *, where: str | None = None) -> ModelConfig:
    """Rebuild a model config from `config_to_dict`'s output (strict: unknown keys are errors)."""
    data = dict(data)
    kind = data.pop("kind", None)
    if kind not in MODELS:
        raise ConfigError(f"unknown model kind {kind!r}" + (f" in {where}" if where else ""), did_you_mean(str(kind), MODELS))
    return from_dict(MODELS[kind][0], data, where=where)


def build_model(cfg: ModelConfig | dict[str, Any], seed: int = 0) -> nn.Module:
    """Build a freshly initialised model from a config (or its dict form)."""
    if isinstance(cfg, dict):
        cfg = config_from_dict(cfg)
    return MODELS[cfg.kind][1](cfg, seed=seed)


def load_model(path: str | Path) -> tuple[nn.Module, Checkpoint]:
    """Load the model stored in a checkpoint folder, or in a run folder's latest checkpoint.

    Returns:
        The model in eval mode, and the `Checkpoint` (step, config, metadata, train state).

    Raises:
        CheckpointError: If the checkpoint is missing or damaged, or its weights do not match
            the model config stored in the run.
    """
    ckpt = load_checkpoint(path, load_train_state=False)
    cfg = config_from_dict(ckpt.config["model"], where=str(ckpt.run_dir / "config.json"))
    model = build_model(cfg)
    load_state_into(model, ckpt.state_dict, where=str(ckpt.path))
    return model.eval(), ckpt


__all__ = [
    "MODELS", "PRESETS", "ModelConfig", "QuadraticMLP", "QuadraticMLPConfig", "Transformer",
    "TransformerConfig", "build_model", "config_from_dict", "config_to_dict", "load_model",
    "preset_config",
]
