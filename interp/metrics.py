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

from interp.splits import Split

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


def mean_loss(logits: Float[Tensor, "batch d_vocab_out"], labels: Int[Tensor, " batch"], loss: str) -> Tensor:
    """`per_example_loss(...).mean()`, the training loss, with MSE as one fused `F.mse_loss`.

    The mean of the per-example means over classes is the mean over all entries, so MSE is
    `F.mse_loss` against the one-hot targets: one pass forward and one backward instead of
    six each (study C's step: 4,704 x 97 entries, about 4 ms of a 60 ms step on a loaded core).
    Cross-entropy is `per_example_loss`'s, unchanged.
    """
    if loss == "mse":
        return F.mse_loss(logits, F.one_hot(labels, logits.shape[-1]).to(logits.dtype))
    return per_example_loss(logits, labels, loss).mean()


@torch.no_grad()
def evaluate(
    readout: Readout, splits: Mapping[str, Split], loss: str, chunk: int = 32768
) -> dict[str, float]:
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
    records: Sequence[Mapping[str, Any]], targets: Mapping[str, tuple[str | tuple[str, ...], float]]
) -> dict[str, dict[str, Any]]:
    """First step at which each target reaches its threshold, and whether it is kept.

    A target names one metric (``("adv/acc", 1.0)``) or several (``(("val/acc", "adv/acc"), 1.0)``:
    reached only at an evaluation where *every* one of them is at or above the threshold).

    Args:
        records: Metrics records in step order (each with a ``"step"`` key).
        targets: Milestone name -> (metric key or keys, threshold), e.g.
            ``{"generalized": ("adv/acc", 1.0), "rule": (("val/acc", "adv/acc"), 1.0)}``.

    Returns:
        For each milestone name a dict with ``metric`` (the key, or the keys joined by ``" & "``),
        ``threshold``, ``step`` (the first step at which it holds, or None) and ``kept`` (it
        still holds at the last record that has all its keys).
    """
    result = {}
    for name, (metric, threshold) in targets.items():
        keys = (metric,) if isinstance(metric, str) else tuple(metric)
        scored = [r for r in records if all(k in r for k in keys)]
        hits = [r["step"] for r in scored if all(r[k] >= threshold for k in keys)]
        result[name] = {
            "metric": " & ".join(keys),
            "threshold": threshold,
            "step": hits[0] if hits else None,
            "kept": bool(scored) and all(scored[-1][k] >= threshold for k in keys),
        }
    return result
