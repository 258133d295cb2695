"""Vocabulary extension keeps the original function on original inputs."""

from __future__ import annotations

import pytest
import torch

from models import build_model, preset_config
from models.vocab import extend_vocab
from tasks import ModAddTask, NoiseInjectionTask


@pytest.fixture
def model():
    return build_model(preset_config("modadd-1l", ModAddTask(p=11), d_model=16, d_head=4, d_mlp=32), seed=3)


@pytest.mark.parametrize("n_classes", [0, 5])
def test_original_logits_on_original_inputs_unchanged(model, n_classes):
    tokens = ModAddTask(p=11).splits(0)["train"].tokens
    before = model.readout(tokens)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    new = extend_vocab(model, 5, n_classes, seed=0)
    assert new.cfg.d_vocab == 12 + 5 and new.cfg.d_vocab_out == 11 + n_classes
    after = new.readout(tokens)
    # Same classes: the very same arithmetic. New classes widen W_U's matmul: fp32 rounding only.
    torch.testing.assert_close(after[:, :11], before, rtol=0, atol=0 if n_classes == 0 else 1e-6)
    torch.testing.assert_close(new.fast_readout(tokens)[:, :11], before, rtol=0, atol=1e-5)
    assert all(torch.equal(v, original[k]) for k, v in model.state_dict().items())  # left untouched


def test_new_rows_are_drawn_with_the_std_of_the_old_ones(model):
    new = extend_vocab(model, 400, 0, seed=1)
    rows = new.W_E[12:].detach()
    assert rows.std().item() == pytest.approx(model.W_E.std().item(), rel=0.1)
    torch.testing.assert_close(new.W_E[:12], model.W_E)
    assert torch.equal(extend_vocab(model, 3, seed=2).W_E, extend_vocab(model, 3, seed=2).W_E)


def test_extended_model_reads_the_noise_task(model):
    task = NoiseInjectionTask(p=11, k=5)
    new = extend_vocab(model, task.k)
    assert new.readout(task.splits(0)["train"].tokens).shape == (
        len(task.splits(0)["train"]),
        task.d_vocab_out,
    )


def test_negative_counts_are_refused(model):
    with pytest.raises(ValueError):
        extend_vocab(model, -1)
