"""`interp.dissect.pruning`: removing neurons at a hook; the fully pruned model's "chance" accuracy."""

from __future__ import annotations

import pytest
import torch

from interp.dissect.pruning import prune_curve, removal_counts, zero_neurons_hook
from interp.metrics import evaluate
from models import QuadraticMLP, QuadraticMLPConfig
from tasks import ModAddTask

TASK = ModAddTask(p=11, xi=0.3)


@pytest.fixture(scope="module")
def model() -> QuadraticMLP:
    return QuadraticMLP(
        QuadraticMLPConfig(d_vocab=TASK.d_vocab, d_vocab_out=TASK.d_vocab_out, d_hidden=24), seed=3
    ).eval()


def test_removing_every_neuron_gives_zero_logits_and_class_zero_accuracy(model):
    splits = TASK.splits(0)
    counts, records = prune_curve(model, torch.arange(24), splits, fractions=[0.0, 1.0])
    assert counts == [0, 24]
    with model.hooks(fwd_hooks=[("hook_post", zero_neurons_hook(torch.ones(24)))]):
        assert torch.count_nonzero(model(splits["train"].tokens)) == 0
    # All logits tie at 0 and argmax picks the first class, so accuracy is exactly the share of
    # labels equal to 0 in every split and group ("chance" under that tie-break, ~1/p).
    for name, split in splits.items():
        assert records[1][f"{name}/acc"] == pytest.approx((split.labels == 0).float().mean().item())
        for group, mask in split.groups.items():
            if mask.any():
                assert records[1][f"{name}/{group}/acc"] == pytest.approx(
                    (split.labels[mask] == 0).float().mean().item()
                )
    assert abs(records[1]["test/acc"] - 1 / TASK.p) < 0.05


def test_removing_nothing_is_the_plain_evaluation(model):
    splits = TASK.splits(0)
    _, records = prune_curve(model, torch.randperm(24), splits, fractions=[0.0])
    assert records[0] == evaluate(model.readout, splits, "cross_entropy")


def test_counts_and_order_validation(model):
    assert removal_counts(500, [0, 0.0001, 0.5, 1]) == [0, 250, 500]
    with pytest.raises(ValueError, match="permutation"):
        prune_curve(model, torch.zeros(24, dtype=torch.long), TASK.splits(0))
    with pytest.raises(ValueError, match="fractions"):
        removal_counts(10, [0, 1.5])
