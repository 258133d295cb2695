"""`demo-max`: the largest of `n` tokens, read at a final SEP token.

Inputs are ``[t_1, ..., t_n, SEP]`` with ``t_i`` in ``0..vocab-1`` and ``SEP = vocab``; the
label is ``max(t_i)``. Groups: ``last_is_max`` (the largest token is the last one before SEP, a
shortcut a model may learn first) and ``other``. Torch-free until `splits` is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from interp.config import check_int, param, to_dict


@dataclass(frozen=True)
class DemoMaxTask:
    """The largest of `n` tokens (an `interp.splits.Task`)."""

    name: ClassVar[str] = "demo-max"
    split_names: ClassVar[tuple[str, ...]] = ("train", "val")
    milestones: ClassVar[dict[str, tuple[str, float]]] = {"t_val": ("val/acc", 0.95)}

    vocab: int = param(8, "Token values 0..vocab-1 (SEP is vocab); at least 2.")
    n: int = param(3, "Tokens before SEP; at least 1.")
    n_train: int = param(256, "Training examples.")
    n_val: int = param(128, "Validation examples.")

    def __post_init__(self) -> None:
        check_int("DemoMaxTask", "vocab", self.vocab, 2)
        check_int("DemoMaxTask", "n", self.n, 1)
        check_int("DemoMaxTask", "n_train", self.n_train, 1)
        check_int("DemoMaxTask", "n_val", self.n_val, 1)

    @property
    def d_vocab(self) -> int:
        """The token values and SEP."""
        return self.vocab + 1

    @property
    def d_vocab_out(self) -> int:
        """One class per token value."""
        return self.vocab

    @property
    def n_ctx(self) -> int:
        """`n` tokens and SEP."""
        return self.n + 1

    def splits(self, data_seed: int) -> dict[str, Any]:
        """``train`` and ``val``, drawn from one generator seeded by `data_seed`."""
        import numpy as np

        from interp.splits import Split

        rng = np.random.default_rng(data_seed)
        out = {}
        for name, size in (("train", self.n_train), ("val", self.n_val)):
            values = rng.integers(0, self.vocab, size=(size, self.n))
            tokens = np.concatenate([values, np.full((size, 1), self.vocab)], axis=1).astype(np.int64)
            labels = values.max(axis=1).astype(np.int64)
            last = values[:, -1] == labels
            out[name] = Split.from_numpy(name, tokens, labels, {"last_is_max": last, "other": ~last})
        return out

    def to_dict(self) -> dict[str, Any]:
        """The config with its ``name``."""
        return {"name": self.name, **to_dict(self)}
