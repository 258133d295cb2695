"""`interp.splits.Split`: moving a split between devices."""

from __future__ import annotations

import torch

from interp.splits import Split


def test_to_moves_every_tensor_and_is_free_where_they_are():
    split = Split(
        "train",
        torch.zeros(4, 3, dtype=torch.long),
        torch.zeros(4, dtype=torch.long),
        {"a": torch.tensor([True, False, True, False])},
        {"e": torch.ones(4, 2)},
    )
    assert split.to("cpu") is split
    moved = split.to("meta")  # a device every machine has
    tensors = [moved.tokens, moved.labels, *moved.groups.values(), *moved.extras.values()]
    assert all(t.device.type == "meta" for t in tensors) and moved.name == "train"
    assert list(moved.groups) == ["a"] and list(moved.extras) == ["e"]
