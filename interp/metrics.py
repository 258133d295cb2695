"""Loss and accuracy of a model on every split and every group mask, and run milestones.

A metrics record is a flat dict, one per evaluation, appended to `metrics.jsonl`:
``{"step": 100, "train/loss": ..., "train/acc": ..., "train/consistent/acc": ..., ...}``.
Flat ``split/group/metric`` keys keep the file greppable and easy to load into a frame.

Milestones are what the studies report about a run: the first evaluated step at which a
metric reaches a threshold (adversarial accuracy 100% = "generalized"; memorising the clean or
the noisy examples, or generalising, at 99%), and whether it still holds at the end ("kept"). `find_rise`
marks where a metric rose to such a level (a phase of training): its onset and end, by one stated
rule, so every figure that marks a phase marks the same epochs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from interp.splits import Split

Readout = Callable[[Tensor], Tensor]
LOSSES = ("cross_entropy", "mse")


def full_precision(logits: Tensor) -> Tensor:
    """`logits` in float32 at least: losses and argmaxes never run in bf16 (autocast's output),
    and a float64 model (an oracle test's) keeps float64.
    """
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def per_example_loss(
    logits: Float[Tensor, "batch d_vocab_out"], labels: Int[Tensor, " batch"], loss: str
) -> Float[Tensor, " batch"]:
    """Per-example loss: cross-entropy, or MSE against one-hot targets (mean over classes)."""
    if loss == "cross_entropy":
        return F.cross_entropy(full_precision(logits), labels, reduction="none")
    if loss == "mse":
        target = F.one_hot(labels, logits.shape[-1]).to(logits.dtype)
        return (logits - target).square().mean(-1)
    raise ValueError(f"unknown loss {loss!r}; valid: {', '.join(LOSSES)}")


def mean_loss(logits: Float[Tensor, "batch d_vocab_out"], labels: Int[Tensor, " batch"], loss: str) -> Tensor:
    """`per_example_loss(...).mean()`, the training loss, with MSE as one fused `F.mse_loss`.

    The mean of the per-example means over classes is the mean over all entries, so MSE is
    `F.mse_loss` against the one-hot targets: one pass forward and one backward instead of
    six each (a quadratic MLP's step: 4,704 x 97 entries, about 4 ms of a 60 ms step on a loaded core).
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
            logits = full_precision(readout(split.tokens[start : start + chunk]))
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


@dataclass(frozen=True)
class Rise:
    """Where a metric rose to its target (`find_rise`).

    Attributes:
        onset: The step of the last evaluation before the rise at which the metric was within
            `tol` of its plateau: the rise starts after it.
        end: The step of the first evaluation at which the metric reached ``target - tol`` (and
            held it for `hold` evaluations).
        plateau: The level before the rise (a median; see `find_rise`).
        target: The level risen to; `tol` the tolerance both ends were found with.
    """

    onset: int
    end: int
    plateau: float
    target: float
    tol: float


def find_rise(
    records: Sequence[Mapping[str, Any]],
    metric: str | tuple[str, ...],
    target: float,
    tol: float = 0.05,
    hold: int = 1,
) -> Rise | None:
    """The onset and end of the first rise of `metric` from its plateau to `target`.

    The rule, on ``y_i``: the metric at evaluation i (records in step order; several keys: their
    minimum, so ``("val/acc", "adv/acc")`` rises when both have; records lacking a key skipped):

    * **end** ``e``: the first evaluation from which ``y >= target - tol`` at `hold` consecutive
      evaluations;
    * **plateau** ``P``: the median of ``y_i`` over the evaluations before ``e`` whose value is at
      most half-way from the lowest of them to the target, ``y_i <= (min_{i<e} y_i + target) / 2``
      (the level the metric sat at, robust to noise and to the early transient, and blind to the
      upper half of the rise itself);
    * **onset**: the last evaluation before ``e`` at which ``y <= P + tol``.

    So on a noisy curve the onset is where the metric last sat at its plateau, and the end the
    first evaluation within `tol` of the target; a curve that rises, falls and rises again gives
    its first rise (its end is the first evaluation at the target). None when no evaluation
    reaches ``target - tol`` (it never rose) or the first one does (it never sat below the
    target, so nothing rose).

    Args:
        records: Metrics records (``{"step": ..., key: value}``), in step order.
        metric: A key, or several keys whose minimum is the measure.
        target: The level of the milestone (e.g. val and adv accuracy at 1.0).
        tol: Tolerance, in the metric's units, at both ends.
        hold: Evaluations in a row the end must hold ``target - tol`` (1: the first one that does).

    Returns:
        The rise, or None.
    """
    keys = (metric,) if isinstance(metric, str) else tuple(metric)
    scored = [r for r in records if all(k in r for k in keys)]
    steps = [r["step"] for r in scored]
    y = [min(float(r[k]) for k in keys) for r in scored]
    high = [v >= target - tol for v in y]
    end = next((i for i in range(len(y) - hold + 1) if all(high[i : i + hold])), None)
    if not end:  # None: never reached; 0: at the target from the first evaluation
        return None
    before = y[:end]
    half_way = (min(before) + target) / 2
    plateau = statistics.median(v for v in before if v <= half_way)
    onset = max(i for i, v in enumerate(before) if v <= plateau + tol)
    return Rise(onset=steps[onset], end=steps[end], plateau=plateau, target=target, tol=tol)
