"""Golden tests of ``fourier`` and ``progress`` on hand-built models whose embeddings use known
frequencies.

The quadratic MLP solves ``x + y mod p`` exactly with the Fourier-multiplication circuit: for
each key frequency k and phases ``phi_i = 2 pi i / 3``, ``psi_j = 2 pi j / 3`` (i, j in 0..2) one
neuron reads ``cos(w_k x + phi_i)`` and ``cos(w_k y + psi_j)`` and writes
``cos(w_k c + phi_i + psi_j)`` to class c. Summed over the 9 phase pairs, everything but
``(9 / 2) cos(w_k (x + y - c))`` cancels, so its logits lie exactly in the key frequencies of
``x + y``: restricted loss = full loss, excluded logits = 0 (loss ln p), and every neuron,
``(cos A + cos B)^2``, has 4/5 of its variance at k (products) and 1/5 at 2k.
"""

from __future__ import annotations

import math

import pytest
import torch

import models
import tasks
from analyses import fourier, progress
from analyses.subject import Subject
from interp.errors import ConfigError
from tests.builders import tiny_config

P, KEYS = 17, (2, 5)
TASK = tasks.ModAddTask(p=P, train_frac=0.5)


def _circuit_mlp() -> models.QuadraticMLP:
    model = models.build_model(models.preset_config("quadratic-mlp", TASK, d_hidden=9 * len(KEYS)))
    x = torch.arange(P).double()
    left, right, out = [], [], []
    for k in KEYS:
        w = 2 * math.pi * k / P
        for i in range(3):
            for j in range(3):
                phi, psi = 2 * math.pi * i / 3, 2 * math.pi * j / 3
                left.append(torch.cos(w * x + phi))
                right.append(torch.cos(w * x + psi))
                out.append(torch.cos(w * x + phi + psi))
    with torch.no_grad():
        model.W_E_left.zero_()
        model.W_E_right.zero_()
        model.W_E_left[:P] = torch.stack(left, 1).float()
        model.W_E_right[:P] = torch.stack(right, 1).float()
        model.W_U.copy_(torch.stack(out).float())
    return model.eval()


def _subject(model) -> Subject:
    return Subject(model=model, task=TASK, splits=TASK.splits(0), step=5)


def test_fourier_finds_the_built_in_frequencies_and_each_neurons_share():
    result = fourier.compute(_subject(_circuit_mlp()), fourier.Params())
    assert result.key_frequencies == list(KEYS)
    expected = torch.zeros(P // 2)
    expected[[k - 1 for k in KEYS]] = 0.5
    torch.testing.assert_close(result.embed_power, expected, atol=1e-6, rtol=0)
    assert result.neuron_frequency.tolist() == [KEYS[0]] * 9 + [KEYS[1]] * 9
    torch.testing.assert_close(result.neuron_fve, torch.full((18,), 0.8), atol=1e-5, rtol=0)
    torch.testing.assert_close(result.fve[2 * KEYS[0] - 1, :9], torch.full((9,), 0.2), atol=1e-5, rtol=0)
    frame = result.to_frame()
    assert frame["key"].iloc[:2].all() and frame["neurons"].iloc[:2].tolist() == [9, 9]


def test_progress_restricted_loss_is_the_full_loss_and_excluded_is_chance():
    result = progress.compute(_subject(_circuit_mlp()), progress.Params())
    assert result.key_frequencies == list(KEYS) and result.splits == ["train", "test"]
    full, restricted, excluded = (result.kinds.index(k) for k in ("full", "restricted", "excluded"))
    torch.testing.assert_close(result.loss[:, restricted], result.loss[:, full], atol=1e-5, rtol=0)
    assert (result.accuracy[:, full] == 1).all() and (result.accuracy[:, restricted] == 1).all()
    torch.testing.assert_close(result.loss[:, excluded], torch.full((2,), math.log(P)), atol=1e-5, rtol=0)


def test_excluding_one_key_leaves_the_other_and_wrong_keys_restrict_to_chance():
    subject = _subject(_circuit_mlp())
    one = progress.compute(subject, progress.Params(frequencies="2"))
    excluded = one.kinds.index("excluded")
    assert (one.accuracy[:, excluded] == 1).all(), "frequency 5 alone still adds correctly"
    wrong = progress.compute(subject, progress.Params(frequencies="1,3"))
    torch.testing.assert_close(
        wrong.loss[:, wrong.kinds.index("restricted")], torch.full((2,), math.log(P)), atol=1e-5, rtol=0
    )


def test_a_transformer_embedding_with_known_frequencies():
    cfg = models.TransformerConfig(
        n_layers=1,
        n_heads=2,
        d_model=8,
        d_mlp=16,
        n_ctx=3,
        d_vocab=P + 1,
        d_vocab_out=P,
        normalization_type=None,
    )
    model = models.Transformer(cfg, seed=0).eval()
    x = torch.arange(P).double()
    with torch.no_grad():
        model.W_E[:P] = 0
        for col, (k, f) in enumerate([(3, torch.cos), (3, torch.sin), (7, torch.cos), (7, torch.sin)]):
            model.W_E[:P, col] = (1.2 if k == 3 else 1.0) * f(2 * math.pi * k * x / P).float()
    result = fourier.compute(_subject(model), fourier.Params())
    assert result.key_frequencies == [3, 7]
    torch.testing.assert_close(
        result.embed_power[[2, 6]], torch.tensor([1.44, 1.0]) / 2.44, atol=1e-6, rtol=0
    )
    assert result.embed_power.sum().item() == pytest.approx(1.0)
    dead = result.neuron_fve.isnan()  # ReLU neurons that never fire on the grid have no variance
    assert result.neuron_fve.shape == (16,) and (result.neuron_frequency[dead] == 0).all()
    assert ((result.neuron_fve[~dead] >= 0) & (result.neuron_fve[~dead] <= 1 + 1e-6)).all() and (~dead).any()
    assert fourier.compute(_subject(model), fourier.Params(frequencies="7")).key_frequencies == [7]
    measured = progress.compute(_subject(model), progress.Params())
    assert measured.loss.shape == (2, 3) and measured.loss.isfinite().all()


@pytest.mark.parametrize(
    ("module", "params", "match"),
    [
        (fourier, fourier.Params(frequencies="9"), "1..8"),
        (fourier, fourier.Params(layer=3), "layer"),
        (progress, progress.Params(key_ratio=0.0), "ratio"),
    ],
)
def test_bad_parameters_are_config_errors(module, params, match):
    cfg = models.TransformerConfig(
        n_layers=1, n_heads=1, d_model=8, d_mlp=8, n_ctx=3, d_vocab=P + 1, d_vocab_out=P
    )
    with pytest.raises(ConfigError, match=match):
        module.compute(_subject(models.Transformer(cfg).eval()), params)


def test_progress_measures_refuse_other_tasks():
    mpsp = tasks.MPSPTask(vocab=12, n=4, n_train=32, n_val=16, n_adv=16)
    cfg = tiny_config(mpsp, n_layers=1, n_heads=1, d_model=8, d_mlp=8)
    subject = Subject(model=models.Transformer(cfg).eval(), task=mpsp, splits=mpsp.splits(0))
    with pytest.raises(ConfigError, match="modadd"):
        progress.compute(subject, progress.Params())
