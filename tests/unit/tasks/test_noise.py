"""Noise-injection sets of study B."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.errors import ConfigError
from interp.splits import Task
from tasks import ModAddTask, NoiseInjectionTask


def _expected_label(a: int, b: int, task: NoiseInjectionTask) -> int | None:
    """Noise label by plain Python (None for random labels)."""
    if task.noise == "random":
        return None
    label = (a * a + b) % task.k if task.noise == "square" else (a + b) % task.k
    return label + (task.p if task.new_classes else 0)


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(5, 29),
    k=st.integers(1, 12),
    noise=st.sampled_from(["random", "square", "sum"]),
    new_classes=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_noise_set_and_splits(p: int, k: int, noise: str, new_classes: bool, seed: int) -> None:
    if k > p and not new_classes:
        return
    task = NoiseInjectionTask(p=p, k=k, noise=noise, new_classes=new_classes)
    assert task.d_vocab == p + 1 + k and task.n_ctx == 3
    assert task.d_vocab_out == (p + k if new_classes else p)
    splits = task.splits(seed)
    noise_split = splits["noise"]
    assert len(noise_split) == k * k
    pairs = []
    for i, (ta, tb, eq) in enumerate(noise_split.tokens.tolist()):
        a, b = ta - (p + 1), tb - (p + 1)
        assert 0 <= a < k and 0 <= b < k and eq == p
        pairs.append((a, b))
        label = noise_split.labels[i].item()
        expected = _expected_label(a, b, task)
        if expected is None:
            low = p if new_classes else 0
            assert low <= label < low + k
        else:
            assert label == expected
    assert sorted(pairs) == [(a, b) for a in range(k) for b in range(k)]
    assert bool(noise_split.groups["noise"].all()) and not bool(noise_split.groups["original"].any())

    original = ModAddTask(p=p).splits(seed)
    train, n_orig = splits["train"], len(original["train"])
    assert torch.equal(train.tokens, torch.cat([original["train"].tokens, noise_split.tokens]))
    assert torch.equal(train.labels, torch.cat([original["train"].labels, noise_split.labels]))
    assert train.groups["original"].tolist() == [True] * n_orig + [False] * k * k
    assert torch.equal(train.groups["noise"], ~train.groups["original"])
    assert torch.equal(splits["test"].tokens, original["test"].tokens)
    assert torch.equal(splits["test"].labels, original["test"].labels)
    assert bool(splits["test"].groups["original"].all()) and not bool(splits["test"].groups["noise"].any())
    assert int(train.tokens.max()) < task.d_vocab and int(train.labels.max()) < task.d_vocab_out


def test_defaults() -> None:
    task = NoiseInjectionTask()
    splits = task.splits(0)
    assert (task.p, task.k, task.d_vocab, task.d_vocab_out) == (67, 37, 105, 67)
    assert len(splits["noise"]) == 37 * 37
    assert len(splits["train"]) == int(0.5 * 67 * 67) + 37 * 37
    assert isinstance(task, Task)


def test_random_labels_follow_the_seed() -> None:
    task = NoiseInjectionTask(p=11, k=9)
    assert torch.equal(task.splits(1)["noise"].labels, task.splits(1)["noise"].labels)
    assert not torch.equal(task.splits(1)["noise"].labels, task.splits(2)["noise"].labels)
    assert task.splits(1)["train"].digest() == task.splits(1)["train"].digest()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"k": 68}, "k = 68"),
        ({"k": 0}, "k = 0"),
        ({"noise": "squares"}, "did you mean 'square'"),
        ({"new_classes": "yes"}, "'yes'"),
        ({"p": 1}, "p = 1"),
        ({"train_frac": 1.5}, "1.5"),
    ],
)
def test_bad_config_names_the_value(kwargs: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        NoiseInjectionTask(**kwargs)


def test_k_above_p_allowed_with_new_classes() -> None:
    task = NoiseInjectionTask(p=5, k=7, new_classes=True)
    assert task.d_vocab_out == 12
    assert int(task.splits(0)["noise"].labels.min()) >= 5
