"""Modular addition with nested label corruption (studies B and C)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.errors import ConfigError
from interp.splits import Task, split_digests
from tasks import ModAddTask

SMALL = settings(max_examples=40, deadline=None)


def _corrupted_labels(split) -> dict[tuple[int, int], int]:  # noqa: ANN001
    """``{(x, y): label}`` of the corrupted rows of a train split."""
    mask = split.groups["corrupted"]
    return {(x, y): lab for (x, y, _), lab in zip(split.tokens[mask].tolist(), split.labels[mask].tolist())}


def test_study_c_sizes() -> None:
    task = ModAddTask.study_c()
    splits = task.splits(0)
    assert (len(splits["train"]), len(splits["test"])) == (4704, 4705)
    assert (task.p, task.d_vocab, task.d_vocab_out, task.n_ctx) == (97, 98, 97, 3)
    assert ModAddTask.study_b().p == 67
    assert ModAddTask.study_c(xi=0.3).xi == 0.3
    assert isinstance(task, Task)


@SMALL
@given(p=st.integers(2, 23), frac=st.floats(0.05, 0.95), xi=st.floats(0.0, 0.99), seed=st.integers(0, 2**31))
def test_labels_partition_and_corruption(p: int, frac: float, xi: float, seed: int) -> None:
    if not 0 < int(frac * p * p) < p * p:
        return
    task = ModAddTask(p=p, train_frac=frac, xi=xi)
    train, test = task.splits(seed)["train"], task.splits(seed)["test"]
    assert len(train) == int(frac * p * p) and len(train) + len(test) == p * p
    pairs = [tuple(t[:2]) for t in train.tokens.tolist()] + [tuple(t[:2]) for t in test.tokens.tolist()]
    assert sorted(pairs) == [(x, y) for x in range(p) for y in range(p)]  # disjoint and covering
    for split in (train, test):
        for i, (x, y, eq) in enumerate(split.tokens.tolist()):
            assert eq == p
            assert split.extras["true_labels"][i].item() == (x + y) % p
            corrupted = split.groups["corrupted"][i].item()
            assert split.groups["clean"][i].item() == (not corrupted)
            if corrupted:
                assert split.labels[i].item() != (x + y) % p
                assert 0 <= split.labels[i].item() < p
            else:
                assert split.labels[i].item() == (x + y) % p
    assert int(train.groups["corrupted"].sum()) == int(xi * len(train))
    assert bool(test.groups["clean"].all()) and not bool(test.groups["corrupted"].any())


@SMALL
@given(
    p=st.integers(3, 31),
    xis=st.lists(st.floats(0.0, 0.99), min_size=2, max_size=2),
    seed=st.integers(0, 2**31),
)
def test_corruption_is_nested_and_partition_ignores_xi(p: int, xis: list[float], seed: int) -> None:
    low, high = sorted(xis)
    a = ModAddTask(p=p, xi=low).splits(seed)
    b = ModAddTask(p=p, xi=high).splits(seed)
    for name in ("train", "test"):
        assert torch.equal(a[name].tokens, b[name].tokens)
        assert torch.equal(a[name].extras["true_labels"], b[name].extras["true_labels"])
    small, large = _corrupted_labels(a["train"]), _corrupted_labels(b["train"])
    assert small.keys() <= large.keys()
    assert all(large[pair] == label for pair, label in small.items())


def test_wrong_labels_cover_the_wrong_classes() -> None:
    train = ModAddTask(p=11, train_frac=0.9, xi=0.9).splits(0)["train"]
    mask = train.groups["corrupted"]
    offsets = (train.labels[mask] - train.extras["true_labels"][mask]) % 11
    assert set(offsets.tolist()) == set(range(1, 11))


def test_deterministic_per_seed() -> None:
    task = ModAddTask(p=13, xi=0.3)
    assert split_digests(task.splits(5)) == split_digests(task.splits(5))
    a, b = split_digests(task.splits(5)), split_digests(task.splits(6))
    assert a["train"] != b["train"] and a["test"] != b["test"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"xi": 1.2}, "1.2"),
        ({"xi": 1.0}, "xi = 1.0"),
        ({"xi": -0.1}, "-0.1"),
        ({"p": 1}, "p = 1"),
        ({"p": 9.5}, "9.5"),
        ({"train_frac": 0.0}, "train_frac = 0.0"),
        ({"train_frac": 1.0}, "train_frac = 1.0"),
        ({"p": 3, "train_frac": 0.05}, "0.05"),
    ],
)
def test_bad_config_names_the_value(kwargs: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("-", r"\-")):
        ModAddTask(**kwargs)
