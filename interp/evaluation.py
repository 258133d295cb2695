"""Loss and accuracy of a model on every split and every group mask, and run milestones.

A metrics record is a flat dict, one per evaluation, appended to `metrics.jsonl`:
``{"step": 100, "train/loss": ..., "train/acc": ..., "train/consistent/acc": ..., ...}``.
Flat ``split/group/metric`` keys keep the file greppable and easy to load into a frame.

Milestones are what the studies report about a run: the first evaluated step at which a
metric reaches a threshold (study A: adv accuracy 100% = "generalized"; study C: `t_mem_clean`,
`t_mem_noisy`, `t_gen` at 99%), and whether it still holds at the end ("kept").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.data import Split

Readout = Callable[[Tensor], Tensor]
LOSSES = ("cross_entropy", "mse")


def per_example_loss(
    logits: Float[Tensor, "batch d_vocab_out"], labels: Int[Tensor, " batch"], loss: str
) -> Float[Tensor, " batch"]:
    """Per-example loss: cross-entropy, or MSE against one-hot targets (mean over classes)."""
    if loss == "cross_entropy":
        return F.cross_entropy(logits.float(), labels, reduction="none")
    if loss == "mse":
        target = F.one_hot(labels, logits.shape[-1]).to(logits.dtype)
        return (logits - target).square().mean(-1)
    raise ValueError(f"unknown loss {loss!r}; valid: {', '.join(LOSSES)}")


@torch.no_grad()
def evaluate(readout: Readout, splits: Mapping[str, Split], loss: str, chunk: int = 32768) -> dict[str, float]:
    """Return loss and accuracy on every split and on every group of each split.

    Args:
        readout: Maps tokens [batch, pos] to readout logits [batch, d_vocab_out].
        splits: The splits to evaluate.
        loss: ``"cross_entropy"`` or ``"mse"``.
        chunk: Largest batch evaluated at once (bounds memory on big splits).

    Returns:
        A flat dict of ``"split/loss"``, ``"split/acc"``, ``"split/group/loss"``,
        ``"split/group/acc"``. A group with no examples gets no entry.
    """
    out: dict[str, float] = {}
    for name, split in splits.items():
        losses, correct = [], []
        for start in range(0, len(split), chunk):
            logits = readout(split.tokens[start : start + chunk]).float()
            labels = split.labels[start : start + chunk]
            losses.append(per_example_loss(logits, labels, loss))
            correct.append((logits.argmax(-1) == labels).float())
        loss_all, correct_all = torch.cat(losses), torch.cat(correct)
        out[f"{name}/loss"], out[f"{name}/acc"] = loss_all.mean().item(), correct_all.mean().item()
        for group, mask in split.groups.items():
            if mask.any():
                out[f"{name}/{group}/loss"] = loss_all[mask].mean().item()
                out[f"{name}/{group}/acc"] = correct_all[mask].mean().item()
    return out


def milestones(
    records: Sequence[Mapping[str, Any]], targets: Mapping[str, tuple[str, float]]
) -> dict[str, dict[str, Any]]:
    """First step at which each target metric reaches its threshold, and whether it is kept.

    Args:
        records: Metrics records in step order (each with a ``"step"`` key).
        targets: Milestone name -> (metric key, threshold), e.g.
            ``{"generalized": ("adv/acc", 1.0)}``.

    Returns:
        For each milestone name a dict with ``metric``, ``threshold``, ``step`` (the first step
        at or above the threshold, or None) and ``kept`` (the last record is still at or above it).
    """
    result = {}
    for name, (key, threshold) in targets.items():
        hits = [r["step"] for r in records if key in r and r[key] >= threshold]
        last = next((r[key] for r in reversed(records) if key in r), None)
        result[name] = {
            "metric": key, "threshold": threshold, "step": hits[0] if hits else None,
            "kept": last is not None and last >= threshold,
        }
    return result
