"""Oracle: `interp.dissect.ablation` against weight surgery and means computed by hand."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import models
import tasks
from interp.dissect.ablation import ablate, components, parse_kinds
from interp.errors import ConfigError
from tests.oracle.oracle_models import random_transformer  # tests/oracle/oracle_models.py

ATOL = 1e-5
TASK = tasks.MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)


@pytest.fixture(scope="module")
def model() -> models.Transformer:
    return random_transformer(TASK, seed=4)


@pytest.fixture(scope="module")
def data():
    split = TASK.splits(0)["train"]
    return split.tokens, split.labels


def _scores(logits: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    return (logits.argmax(-1) == labels).float().mean().item(), F.cross_entropy(logits, labels).item()


def test_components_are_every_head_then_the_mlp_per_layer(model):
    assert [c.name for c in components(model)] == ["L0H0", "L0H1", "L0MLP", "L1H0", "L1H1", "L1MLP"]


def test_zero_ablating_a_head_equals_zeroing_its_w_o_rows(model, data):
    tokens, labels = data
    effect = ablate(model, tokens, labels, "zero")
    for c, comp in enumerate(components(model)):
        surgery = copy.deepcopy(model)
        with torch.no_grad():
            if comp.head is not None:
                surgery.blocks[comp.layer].attn.W_O[comp.head].zero_()
            else:  # an MLP without output weights or bias writes nothing
                surgery.blocks[comp.layer].mlp.W_out.zero_()
                surgery.blocks[comp.layer].mlp.b_out.zero_()
            acc, loss = _scores(surgery(tokens)[:, -1], labels)
        assert effect.accuracy[0, c].item() == pytest.approx(acc, abs=ATOL), comp.name
        assert effect.loss[0, c].item() == pytest.approx(loss, abs=ATOL), comp.name


def test_mean_ablation_equals_replacing_by_a_mean_computed_by_hand(model, data):
    tokens, labels = data
    effect = ablate(model, tokens, labels, "mean")
    modules = dict(model.named_modules())
    for c, comp in enumerate(components(model)):
        recorded = []
        handle = modules[comp.hook].register_forward_hook(
            lambda m, i, out: recorded.append(out.detach().clone())
        )
        try:
            with torch.no_grad():
                model(tokens)
        finally:
            handle.remove()
        act = recorded[0]
        mean = act.sum(0) / act.shape[0]  # [pos, ...]

        def replace(m, i, out, head=comp.head, mean=mean):
            out = out.clone()
            if head is None:
                out[:] = mean
            else:
                out[:, :, head] = mean[:, head]
            return out

        handle = modules[comp.hook].register_forward_hook(replace)
        try:
            with torch.no_grad():
                acc, loss = _scores(model(tokens)[:, -1], labels)
        finally:
            handle.remove()
        assert effect.accuracy[0, c].item() == pytest.approx(acc, abs=ATOL), comp.name
        assert effect.loss[0, c].item() == pytest.approx(loss, abs=ATOL), comp.name


def test_baseline_and_kind_order(model, data):
    tokens, labels = data
    effect = ablate(model, tokens, labels, "mean,zero", max_rows=50)
    assert effect.kinds == ("mean", "zero")
    acc, loss = _scores(model(tokens)[:, -1], labels)
    assert effect.base_accuracy == pytest.approx(acc) and effect.base_loss == pytest.approx(loss, abs=ATOL)
    zero_only = ablate(model, tokens, labels, "zero")
    torch.testing.assert_close(effect.loss[1], zero_only.loss[0], atol=ATOL, rtol=0)


def test_unknown_kind_is_a_config_error():
    with pytest.raises(ConfigError, match="mean"):
        parse_kinds("zero,maen")
