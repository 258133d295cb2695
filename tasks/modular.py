"""Modular addition ``x + y mod p``, with optional label corruption (studies B and C).

Inputs are ``[x, y, EQ]`` with ``EQ = p``; the label is read at EQ. All ``p^2`` ordered pairs
are shuffled by the data seed; the first ``int(train_frac * p^2)`` form `train`, the rest
`test` (p = 97, train_frac 0.5: 4,704 / 4,705).

Study C corrupts ``int(xi * n_train)`` training labels, each replaced by a uniformly drawn
*wrong* class. Both the corrupted set and the wrong labels derive from the data seed alone, not
from `xi`: a fixed permutation of the training examples picks the first ``int(xi * n_train)``
of them, and a fixed per-example offset in ``1..p-1`` is added to the true label. So the sets
are nested across `xi` (the set at 0.2 is a subset of the set at 0.3, with the same wrong
labels), and the train/test partition never depends on `xi`. Test labels are never corrupted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from interp.config import check_int, check_real, param, to_dict
from interp.errors import ConfigError
from tasks.seeding import generator

if TYPE_CHECKING:
    from interp.splits import Split


@dataclass(frozen=True)
class ModAddTask:
    """Config of the modular-addition task (studies B and C)."""

    name: ClassVar[str] = "modadd"
    split_names: ClassVar[tuple[str, ...]] = ("train", "test")  # what `splits` builds
    # Study C's times: first step at >= 99% on clean train examples, on corrupted ones
    # (scored against their corrupted labels), and on the test split.
    milestones: ClassVar[dict[str, tuple[str, float]]] = {
        "t_mem_clean": ("train/clean/acc", 0.99),
        "t_mem_noisy": ("train/corrupted/acc", 0.99),
        "t_gen": ("test/acc", 0.99),
    }

    p: int = param(97, "The modulus: tokens 0..p-1 are numbers, p is EQ; at least 2.")
    train_frac: float = param(0.5, "Fraction of the p^2 pairs used for training, in (0, 1).")
    xi: float = param(0.0, "Fraction of training labels corrupted (always to a wrong class), in [0, 1).")

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "p", self.p, 2)
        check_real(owner, "train_frac", self.train_frac, 0.0, 1.0, low_open=True, high_open=True)
        check_real(owner, "xi", self.xi, 0.0, 1.0, high_open=True)
        if not 0 < self.n_train < self.p**2:
            raise ConfigError(
                f"ModAddTask.train_frac = {self.train_frac!r} gives {self.n_train} of {self.p**2} pairs "
                "for training",
                "both train and test need at least one pair",
            )

    @classmethod
    def study_b(cls, **overrides: Any) -> ModAddTask:
        """Study B's task: ``x + y mod 67``, train fraction 0.5."""
        return cls(**{"p": 67, **overrides})

    @classmethod
    def study_c(cls, xi: float = 0.0, **overrides: Any) -> ModAddTask:
        """Study C's task: ``x + y mod 97``, train fraction 0.5, label noise `xi`."""
        return cls(**{"p": 97, "xi": xi, **overrides})

    @property
    def d_vocab(self) -> int:
        """Input vocabulary: the numbers plus EQ."""
        return self.p + 1

    @property
    def d_vocab_out(self) -> int:
        """Number of classes (p)."""
        return self.p

    @property
    def n_ctx(self) -> int:
        """Sequence length: ``[x, y, EQ]``."""
        return 3

    @property
    def n_examples(self) -> int:
        """Examples over all splits: every pair ``p^2``."""
        return self.p**2

    @property
    def n_train(self) -> int:
        """Number of training pairs, ``int(train_frac * p^2)``."""
        return int(self.train_frac * self.p**2)

    @property
    def n_corrupted(self) -> int:
        """Number of corrupted training labels, ``int(xi * n_train)``."""
        return int(self.xi * self.n_train)

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": "modadd", **fields}``."""
        return {"name": self.name, **to_dict(self)}

    def splits(self, data_seed: int) -> dict[str, Split]:
        """Build `train` and `test` for `data_seed`.

        Returns:
            ``{"train", "test"}`` splits: tokens [batch, 3], labels [batch] (corrupted on
            train), groups `clean` / `corrupted`, extra `true_labels` (int64 [batch]).
        """
        pairs = self._shuffled_pairs(data_seed)
        train, test = pairs[: self.n_train], pairs[self.n_train :]
        corrupted = np.zeros(len(train), dtype=bool)
        corrupted[self._corruption_order(data_seed)[: self.n_corrupted]] = True
        true_train = train.sum(axis=1) % self.p
        labels = np.where(corrupted, (true_train + self._wrong_offsets(data_seed)) % self.p, true_train)
        return {
            "train": self._split("train", train, labels, corrupted),
            "test": self._split("test", test, test.sum(axis=1) % self.p, np.zeros(len(test), dtype=bool)),
        }

    def _shuffled_pairs(self, data_seed: int) -> np.ndarray:
        """All ordered pairs ``(x, y)`` in the seed's order, int64 [p^2, 2]."""
        x, y = np.divmod(np.arange(self.p**2, dtype=np.int64), self.p)
        order = generator(data_seed, "modadd", "partition").permutation(self.p**2)
        return np.stack([x, y], axis=1)[order]

    def _corruption_order(self, data_seed: int) -> np.ndarray:
        """Order in which training examples get corrupted as xi grows, int64 [n_train]."""
        return generator(data_seed, "modadd", "corruption-order").permutation(self.n_train)

    def _wrong_offsets(self, data_seed: int) -> np.ndarray:
        """Per-example offset in ``1..p-1`` added to the true label, int64 [n_train].

        A nonzero offset mod p always gives a wrong class, uniform among the p - 1 wrong ones.
        """
        return generator(data_seed, "modadd", "wrong-offset").integers(1, self.p, size=self.n_train)

    def _split(self, name: str, pairs: np.ndarray, labels: np.ndarray, corrupted: np.ndarray) -> Split:
        from interp.splits import Split  # torch only where data is built: the config imports without it

        tokens = np.concatenate([pairs, np.full((len(pairs), 1), self.p, dtype=np.int64)], axis=1)
        return Split.from_numpy(
            name,
            tokens,
            labels.astype(np.int64),
            {"clean": ~corrupted, "corrupted": corrupted},
            {"true_labels": pairs.sum(axis=1) % self.p},
        )
