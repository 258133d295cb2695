"""MPSP splits (study A): exact ratios, balance, disjointness, determinism, recomputed labels."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.errors import ConfigError
from interp.splits import Task, split_digests
from tasks import MPSPTask

SMALL = settings(max_examples=30, deadline=None)


@st.composite
def small_tasks(draw: st.DrawFn) -> MPSPTask:
    """Small MPSP configs whose sequence space always has room (n >= 3, vocab >= 16)."""
    m_label = draw(st.sampled_from(["sum-mod2", "sum-mod3"]))
    m = 2 if m_label == "sum-mod2" else 3
    r = draw(st.one_of(st.sampled_from([0.0, 1.0, 1 / m, 0.15, 0.5, 0.9]), st.floats(0.0, 1.0)))
    return MPSPTask(
        label=m_label,
        shortcut=draw(st.sampled_from(["max", "first"])),
        r=r,
        n=draw(st.integers(3, 6)),
        vocab=draw(st.integers(16, 64)),
        n_train=draw(st.integers(0, 300)),
        n_val=draw(st.integers(0, 80)),
        n_adv=draw(st.integers(0, 80)),
    )


def _reference(row: list[int], m: int, shortcut: str) -> tuple[int, int, int]:
    """Label, shortcut and first argmax position of one row, computed by plain Python."""
    top = max(row)
    carrier = top if shortcut == "max" else row[0]
    return sum(row) % m, carrier % m, row.index(top)


def _label_counts(labels: torch.Tensor, m: int) -> list[int]:
    return [int((labels == y).sum()) for y in range(m)]


@SMALL
@given(task=small_tasks(), seed=st.integers(0, 2**31))
def test_exact_ratio_sizes_and_balance(task: MPSPTask, seed: int) -> None:
    splits = task.splits(seed)
    assert set(splits) == {"train", "val", "adv"}
    expected_consistent = {"train": round(task.r * task.n_train), "val": task.n_val, "adv": 0}
    sizes = {"train": task.n_train, "val": task.n_val, "adv": task.n_adv}
    for name, split in splits.items():
        assert split.name == name
        assert len(split) == sizes[name]
        consistent, opposing = split.groups["consistent"], split.groups["opposing"]
        assert int(consistent.sum()) == expected_consistent[name]
        assert torch.equal(opposing, ~consistent)
        for mask in (consistent, opposing):
            counts = _label_counts(split.labels[mask], task.m)
            assert sum(counts) == int(mask.sum())
            assert max(counts) - min(counts) <= 1


@SMALL
@given(task=small_tasks(), seed=st.integers(0, 2**31))
def test_labels_shortcut_argmax_and_masks_recomputed(task: MPSPTask, seed: int) -> None:
    for split in task.splits(seed).values():
        assert split.tokens.dtype == torch.int64 and split.labels.dtype == torch.int64
        assert split.tokens.shape == (len(split), task.n + 1)
        for i, tokens in enumerate(split.tokens.tolist()):
            row, sep = tokens[:-1], tokens[-1]
            assert sep == task.vocab
            assert all(0 <= v < task.vocab for v in row)
            label, shortcut, argmax_pos = _reference(row, task.m, task.shortcut)
            assert split.labels[i].item() == label
            assert split.extras["shortcut"][i].item() == shortcut
            assert split.extras["argmax_pos"][i].item() == argmax_pos
            assert split.groups["consistent"][i].item() == (shortcut == label)
            assert split.groups["opposing"][i].item() == (shortcut != label)


@SMALL
@given(task=small_tasks(), seed=st.integers(0, 2**31))
def test_splits_are_disjoint_without_duplicates(task: MPSPTask, seed: int) -> None:
    seen: set[tuple[int, ...]] = set()
    total = 0
    for split in task.splits(seed).values():
        rows = {tuple(r) for r in split.tokens.tolist()}
        assert len(rows) == len(split)
        seen |= rows
        total += len(split)
    assert len(seen) == total


@settings(max_examples=10, deadline=None)
@given(task=small_tasks(), seed=st.integers(0, 2**31))
def test_deterministic_per_seed(task: MPSPTask, seed: int) -> None:
    first, again = task.splits(seed), task.splits(seed)
    assert split_digests(first) == split_digests(again)
    for name in first:
        assert torch.equal(first[name].tokens, again[name].tokens)
        assert torch.equal(first[name].labels, again[name].labels)


def test_different_seeds_differ() -> None:
    task = MPSPTask(vocab=32, n_train=256, n_val=64, n_adv=64)
    a, b = split_digests(task.splits(0)), split_digests(task.splits(1))
    assert all(a[name] != b[name] for name in a)


@pytest.mark.parametrize("label", ["sum-mod2", "sum-mod3"])
@pytest.mark.parametrize("shortcut", ["max", "first"])
def test_default_scale(label: str, shortcut: str) -> None:
    task = MPSPTask(label=label, shortcut=shortcut)
    splits = task.splits(0)
    assert [len(s) for s in splits.values()] == [16384, 2048, 2048]
    assert int(splits["train"].groups["consistent"].sum()) == round(0.9 * 16384)
    assert (task.d_vocab, task.n_ctx, task.d_vocab_out) == (65, 6, task.m)
    assert isinstance(task, Task)


def test_examples_are_shuffled() -> None:
    train = MPSPTask(r=0.5, vocab=32, n_train=512, n_val=0, n_adv=0).splits(0)["train"]
    consistent = train.groups["consistent"].long()
    # Dealt out bucket by bucket, an unshuffled split would have sorted groups and labels.
    assert not torch.equal(consistent, consistent.sort(descending=True).values)
    assert not torch.equal(train.labels, train.labels.sort().values)


def test_exact_ratio_below_chance_three_classes() -> None:
    task = MPSPTask(label="sum-mod3", shortcut="first", r=0.15, vocab=32, n_train=999, n_val=10, n_adv=10)
    train = task.splits(3)["train"]
    assert int(train.groups["consistent"].sum()) == round(0.15 * 999)


def test_too_small_sequence_space_raises() -> None:
    with pytest.raises(ConfigError, match="too small"):
        MPSPTask(n=3, vocab=4, n_train=10, n_val=20, n_adv=10).splits(0)
    with pytest.raises(ConfigError, match="allow only"):
        MPSPTask(n=2, vocab=4, n_train=100).splits(0)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"r": 1.5}, "1.5"),
        ({"r": -0.1}, "-0.1"),
        ({"r": "0.9"}, "'0.9'"),
        ({"label": "sum-mod4"}, "sum-mod4"),
        ({"shortcut": "maxx"}, "maxx"),
        ({"n": 1}, "n = 1"),
        ({"vocab": 2, "label": "sum-mod3"}, "vocab = 2"),
        ({"n_train": -5}, "-5"),
        ({"n_val": 2.5}, "2.5"),
    ],
)
def test_bad_config_names_the_value(kwargs: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("-", r"\-")):
        MPSPTask(**kwargs)


def test_bad_choice_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'max'"):
        MPSPTask(shortcut="maxx")


def test_bad_seed_raises() -> None:
    with pytest.raises(ConfigError, match="-1"):
        MPSPTask(n_train=8, n_val=0, n_adv=0).splits(-1)
