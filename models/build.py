"""Build a model from its config, or load it from a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from interp.store.checkpoint import Checkpoint, load_checkpoint, load_state_into
from models.config import ModelConfig, QuadraticMLPConfig, TransformerConfig, config_from_dict
from models.quadratic_mlp import QuadraticMLP
from models.transformer import Transformer

MODELS: dict[str, type[nn.Module]] = {
    TransformerConfig.kind: Transformer,
    QuadraticMLPConfig.kind: QuadraticMLP,
}
"""Model classes by config ``kind``."""


def build_model(cfg: ModelConfig | dict[str, Any], seed: int = 0) -> nn.Module:
    """Build a freshly initialised model from a config (or its dict form)."""
    if isinstance(cfg, dict):
        cfg = config_from_dict(cfg)
    return MODELS[cfg.kind](cfg, seed=seed)


def load_model(path: str | Path, *, allow_nonfinite: bool = False) -> tuple[nn.Module, Checkpoint]:
    """Load the model stored in a checkpoint folder, or in a run folder's latest checkpoint.

    Args:
        path: A checkpoint folder, or a run folder (its LATEST).
        allow_nonfinite: Load weights holding NaN or inf (refused by default).

    Returns:
        The model in eval mode, and the `Checkpoint` (step, config, metadata, train state).

    Raises:
        CheckpointError: If the checkpoint is missing or damaged, its weights do not match
            the model config stored in the run, or (unless `allow_nonfinite`) are not finite.
    """
    ckpt = load_checkpoint(path, load_train_state=False, allow_nonfinite=allow_nonfinite)
    cfg = config_from_dict(ckpt.config["model"], where=str(ckpt.run_dir / "config.json"))
    model = build_model(cfg)
    load_state_into(model, ckpt.state_dict, where=str(ckpt.path))
    return model.eval(), ckpt
