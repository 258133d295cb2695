"""Build a model from its config, or load it from a checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from interp.store.checkpoint import Checkpoint, load_state_into
from interp.store.handle import RunHandle
from interp.store.layout import CONFIG_FILE
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


def model_from_checkpoint(ckpt: Checkpoint, model: nn.Module | None = None) -> nn.Module:
    """The model of a loaded checkpoint, in eval mode: built from its run's config, or `model` reused.

    Args:
        ckpt: A loaded checkpoint (`interp.store.handle.RunHandle.load_checkpoint`).
        model: A model of the same run to give the weights to, instead of building one (a
            series of checkpoints then builds one model). It takes new tensors, not copies into
            its old ones, so a view taken of the previous weights keeps their values.

    Raises:
        CheckpointError: If the weights do not match the model config stored in the run.
    """
    if model is None:
        cfg = config_from_dict(ckpt.config["model"], where=str(ckpt.run_dir / CONFIG_FILE))
        model = build_model(cfg)
    load_state_into(model, ckpt.state_dict, where=str(ckpt.path), assign=True)
    return model.eval()


def load_model(
    path: str | Path | RunHandle, step: int | None = None, *, allow_nonfinite: bool = False
) -> tuple[nn.Module, Checkpoint]:
    """Load the model stored in a checkpoint folder, or in a run folder's checkpoint.

    Args:
        path: A checkpoint folder, a run folder, or a run opened with `interp.store.handle.RunHandle`.
        step: The checkpoint's step; None: the checkpoint folder given, or the run's LATEST.
        allow_nonfinite: Load weights holding NaN or inf (refused by default).

    Returns:
        The model in eval mode, and the `Checkpoint` (step, config, metadata).

    Raises:
        CheckpointError: If the checkpoint is missing or damaged, its weights do not match
            the model config stored in the run, or (unless `allow_nonfinite`) are not finite.
    """
    ckpt = RunHandle.open(path).load_checkpoint(step, allow_nonfinite=allow_nonfinite)
    return model_from_checkpoint(ckpt), ckpt
