"""Splits: the tensors a task hands to training and analyses, and their digests.

A task (see `tasks/`) is a frozen config plus a deterministic builder
`(config, data_seed) -> {split name: Split}`. Every split holds the input tokens, the labels
read at the last position, and named boolean group masks (`consistent` / `opposing` for
MPSP, `clean` / `corrupted` for label-corrupted modular addition, `original` / `noise` for
noise injection). Extra
per-example tensors that analyses need (the shortcut value, the first argmax position, ...)
live in `extras`.

The digest of a split is a hash of its tensors. It is stored in every checkpoint so an
analysis can refuse data that does not match the run it dissects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor


@dataclass(frozen=True)
class Split:
    """One named set of examples.

    Attributes:
        name: The split's name (`train`, `val`, `adv`, `test`, ...).
        tokens: Input token ids, shape [batch, pos]; the prediction is read at the last position.
        labels: Target class ids, shape [batch].
        groups: Named boolean masks over the examples, each of shape [batch].
        extras: Other per-example tensors (first dimension [batch]) that analyses use.
    """

    name: str
    tokens: Int[Tensor, "batch pos"]
    labels: Int[Tensor, " batch"]
    groups: Mapping[str, Bool[Tensor, " batch"]] = field(default_factory=dict)
    extras: Mapping[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.tokens.shape[0]
        if self.tokens.ndim != 2 or self.labels.shape != (n,):
            raise ValueError(
                f"split {self.name!r}: tokens must be [batch, pos] and labels [batch], "
                f"got {tuple(self.tokens.shape)} and {tuple(self.labels.shape)}"
            )
        for kind, tensors in (("group", self.groups), ("extra", self.extras)):
            for key, value in tensors.items():
                if value.shape[0] != n:
                    raise ValueError(
                        f"split {self.name!r}: {kind} {key!r} has {value.shape[0]} rows, expected {n}"
                    )
        for key, mask in self.groups.items():
            if mask.dtype != torch.bool:
                raise ValueError(f"split {self.name!r}: group {key!r} must be a bool mask")

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @classmethod
    def from_numpy(
        cls,
        name: str,
        tokens: np.ndarray,
        labels: np.ndarray,
        groups: Mapping[str, np.ndarray] | None = None,
        extras: Mapping[str, np.ndarray] | None = None,
    ) -> Split:
        """A split from numpy arrays (int64 tokens [batch, pos] and labels [batch], bool group
        masks and other per-example arrays [batch, ...]); the tensors share their memory.
        """

        def tensor(a: np.ndarray) -> Tensor:
            return torch.from_numpy(np.ascontiguousarray(a))

        return cls(
            name,
            tensor(tokens),
            tensor(labels),
            {k: tensor(v) for k, v in (groups or {}).items()},
            {k: tensor(v) for k, v in (extras or {}).items()},
        )

    def to(self, device: str | torch.device) -> Split:
        """The split with every tensor on `device` (itself when they are there already)."""
        if all(t.device == torch.device(device) for t in (self.tokens, self.labels)):
            return self
        return Split(
            self.name,
            self.tokens.to(device),
            self.labels.to(device),
            {k: v.to(device) for k, v in self.groups.items()},
            {k: v.to(device) for k, v in self.extras.items()},
        )

    def subset(self, index: Tensor) -> Split:
        """Return the examples selected by `index` (a bool mask or integer indices), in order."""
        return Split(
            name=self.name,
            tokens=self.tokens[index],
            labels=self.labels[index],
            groups={k: v[index] for k, v in self.groups.items()},
            extras={k: v[index] for k, v in self.extras.items()},
        )

    def digest(self) -> str:
        """Return a sha256 hex digest of the split's name, tensors, groups and extras.

        Two splits have the same digest exactly when they hold the same examples with
        the same labels and masks, in the same order.
        """
        digest = hashlib.sha256(self.name.encode())
        items = [("tokens", self.tokens), ("labels", self.labels)]
        items += [(f"group:{k}", v) for k, v in sorted(self.groups.items())]
        items += [(f"extra:{k}", v) for k, v in sorted(self.extras.items())]
        for key, tensor in items:
            t = tensor.detach().cpu().contiguous()
            digest.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
            digest.update(t.numpy().tobytes())
        return digest.hexdigest()


@runtime_checkable
class Task(Protocol):
    """What `interp` needs from a task: a named, JSON-serialisable config and its splits.

    Attributes:
        name: The task family's registry name (e.g. ``"mpsp"``).
        d_vocab: Number of input token ids the model must embed.
        d_vocab_out: Number of output classes.
        n_ctx: Sequence length of every example.
        milestones: Optional. ``{name: (metric key or keys, threshold)}``: what a run summary
            reports as "first epoch at which the metric(s) reached the threshold" (see
            `interp.metrics.milestones`).
        split_names: Optional. The names of the splits `splits` returns, known without building
            them (the CLI checks a ``--split`` against them before it imports torch).
    """

    name: str

    @property
    def d_vocab(self) -> int:
        """Number of input token ids the model must embed."""

    @property
    def d_vocab_out(self) -> int:
        """Number of output classes."""

    @property
    def n_ctx(self) -> int:
        """Sequence length of every example."""

    def splits(self, data_seed: int) -> dict[str, Split]:
        """Build every split, deterministically for `data_seed`."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Return the config as a JSON-ready dict (with a ``name`` key)."""
        ...


def split_digests(splits: Mapping[str, Split]) -> dict[str, str]:
    """Return ``{split name: digest}`` for a dict of splits (stored in checkpoints under the
    manifest key ``"fingerprints"``, a name kept for the on-disk format).
    """
    return {name: split.digest() for name, split in splits.items()}
