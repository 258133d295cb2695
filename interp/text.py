"""Plain-text summaries of a task's splits and a model, for the CLI and quick looks.

For MPSP tasks the "measured spurious ratio" of a split is the fraction of its examples in
the `consistent` group (shortcut == label): it must equal the configured ratio exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the hints only: the CLI formats tables before (or without) importing torch
    from torch import nn

    from interp.splits import Split, Task


def format_table(header: list[str], rows: list[list[object]]) -> str:
    """Format rows as a fixed-width text table with a header line."""
    cells = [header] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def splits_table(splits: Mapping[str, Split]) -> str:
    """One row per split: size, then the fraction of examples in each group."""
    groups = sorted({g for split in splits.values() for g in split.groups})
    rows = [
        [name, len(split)]
        + [float(split.groups[g].float().mean()) if g in split.groups else "-" for g in groups]
        for name, split in splits.items()
    ]
    return format_table(["split", "examples"] + [f"frac {g}" for g in groups], rows)


def model_summary(model: nn.Module) -> str:
    """Parameter count and hook points of a hooked model."""
    n_params = sum(p.numel() for p in model.parameters())
    hooks = list(getattr(model, "hook_dict", {}))
    return f"parameters: {n_params:,}\nhook points ({len(hooks)}):\n  " + "\n  ".join(hooks)


def summarize_task_and_model(
    task: Task, splits: Mapping[str, Split], model: nn.Module, *, preset: str
) -> str:
    """The describe report (the CLI's dataset and model summary): the task's config and splits, then the model."""
    config = ", ".join(f"{k}={v}" for k, v in task.to_dict().items())
    return "\n\n".join(
        [
            f"task: {config}",
            splits_table(splits),
            f"model: {preset} (d_vocab={task.d_vocab}, d_vocab_out={task.d_vocab_out}, n_ctx={task.n_ctx})",
            model_summary(model),
        ]
    )
