"""`Preset`: what a plugin's ``interp.presets`` entry point holds (plain data, no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A named model preset from a plugin: an architecture, and what it trains on by default.

    The vocabulary sizes and context length (``d_vocab``, ``d_vocab_out``, ``n_ctx``) come from
    the task, as for the built-in presets, so they are not given here.

    Attributes:
        model: The model config without its sizes: ``kind`` (``"transformer"`` or
            ``"quadratic_mlp"``) and that kind's fields, e.g. ``{"kind": "transformer",
            "n_layers": 1, "n_heads": 2, "d_model": 32, "d_mlp": 64}``.
        task: The task it trains on unless told otherwise: ``{"name": ..., **fields}``.
        train: Its `interp.training.TrainConfig` settings (the rest are the defaults).
        summary: One line for listings.
    """

    model: Mapping[str, Any]
    task: Mapping[str, Any]
    train: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
