"""Study B's noise-injection sets: new number tokens whose pairs carry noise labels.

The vocabulary of ``x + y mod p`` (numbers ``0..p-1``, ``EQ = p``) is extended with `k` new
number tokens ``p+1..p+k``; token ``p+1+a`` stands for the new number ``a`` in ``0..k-1``. The
noise set holds all ``k^2`` ordered pairs ``[p+1+a, p+1+b, EQ]`` in canonical order (row
``a * k + b``, so analyses can reshape it to [k, k]), labelled by one of:

- ``"random"``: a uniform label in ``0..k-1`` per pair, drawn from the data seed;
- ``"square"``: ``(a^2 + b) mod k`` (partly similar to the task);
- ``"sum"``: ``(a + b) mod k`` (very similar).

By default noise labels reuse output classes ``0..k-1`` (so ``k <= p``); with
``new_classes=True`` they are new classes ``p..p+k-1``. Fine-tuning uses `train` = the
original training split (exactly `ModAddTask(p, train_frac).splits(seed)["train"]`) followed
by the noise set, and tracks the original task on `test`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from interp.config import check_bool, check_choice, check_int, check_real, param, to_dict
from interp.errors import ConfigError
from tasks.modular import ModAddTask
from tasks.seeding import generator

if TYPE_CHECKING:
    from interp.splits import Split

NOISE_TYPES: tuple[str, ...] = ("random", "square", "sum")


@dataclass(frozen=True)
class NoiseInjectionTask:
    """Config of study B's noise injection: the original task plus a noise set on new tokens."""

    name: ClassVar[str] = "noise"
    split_names: ClassVar[tuple[str, ...]] = ("train", "test", "noise")  # what `splits` builds
    # Study B fine-tunes until combined train accuracy exceeds 99.8%.
    milestones: ClassVar[dict[str, tuple[str, float]]] = {"memorized": ("train/acc", 0.998)}

    p: int = param(67, "Modulus of the original task.")
    train_frac: float = param(0.5, "Train fraction of the original task, in (0, 1).")
    k: int = param(37, "New number tokens (the noise set has k^2 pairs).")
    noise: str = param("random", "Noise labels: random, square (a^2 + b mod k) or sum (a + b mod k).")
    new_classes: bool = param(False, "Noise labels as new classes p..p+k-1 instead of 0..k-1.")

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_int(owner, "p", self.p, 2)
        check_real(owner, "train_frac", self.train_frac, 0.0, 1.0, low_open=True, high_open=True)
        self.original  # noqa: B018 - also checks that both original splits are non-empty
        check_int(owner, "k", self.k, 1)
        check_choice(owner, "noise", self.noise, NOISE_TYPES)
        check_bool(owner, "new_classes", self.new_classes)
        if not self.new_classes and self.k > self.p:
            raise ConfigError(
                f"NoiseInjectionTask.k = {self.k} exceeds p = {self.p}: noise classes 0..{self.k - 1} do not exist",
                "use k <= p or new_classes=True",
            )

    @property
    def original(self) -> ModAddTask:
        """The uncorrupted modular-addition task that is being disturbed."""
        return ModAddTask(p=self.p, train_frac=self.train_frac, xi=0.0)

    @property
    def eq(self) -> int:
        """The EQ token id (shared with the original task)."""
        return self.p

    @property
    def d_vocab(self) -> int:
        """Input vocabulary: numbers, EQ and the k new tokens."""
        return self.p + 1 + self.k

    @property
    def d_vocab_out(self) -> int:
        """Number of classes: p, or p + k with new classes."""
        return self.p + self.k if self.new_classes else self.p

    @property
    def n_examples(self) -> int:
        """Examples over all splits: the original ``p^2`` pairs and the noise set (twice)."""
        return self.p**2 + 2 * self.k**2

    @property
    def n_ctx(self) -> int:
        """Sequence length: ``[x, y, EQ]``."""
        return 3

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": "noise", **fields}``."""
        return {"name": self.name, **to_dict(self)}

    def splits(self, data_seed: int) -> dict[str, Split]:
        """Build `train` (original train + noise), `test` (original test) and `noise`.

        Returns:
            Splits with tokens [batch, 3], labels [batch] and groups `original` / `noise`.
        """
        from interp.splits import Split  # torch only where data is built: the config imports without it

        base = self.original.splits(data_seed)
        noise = self._noise_split(data_seed)
        train, test = base["train"], base["test"]
        return {
            "train": Split.from_numpy(
                "train",
                np.concatenate([train.tokens.numpy(), noise.tokens.numpy()]),
                np.concatenate([train.labels.numpy(), noise.labels.numpy()]),
                _origin_groups(len(train), len(noise)),
            ),
            "test": Split.from_numpy(
                "test", test.tokens.numpy(), test.labels.numpy(), _origin_groups(len(test), 0)
            ),
            "noise": noise,
        }

    def noise_labels(self, data_seed: int) -> np.ndarray:
        """Labels of the noise set in canonical order, int64 [k^2]."""
        a, b = np.divmod(np.arange(self.k**2, dtype=np.int64), self.k)
        if self.noise == "random":
            labels = generator(data_seed, "noise", "random-labels").integers(0, self.k, size=self.k**2)
        elif self.noise == "square":
            labels = (a * a + b) % self.k
        else:
            labels = (a + b) % self.k
        return labels + (self.p if self.new_classes else 0)

    def _noise_split(self, data_seed: int) -> Split:
        a, b = np.divmod(np.arange(self.k**2, dtype=np.int64), self.k)
        from interp.splits import Split  # torch only where data is built

        tokens = np.stack([self.p + 1 + a, self.p + 1 + b, np.full_like(a, self.eq)], axis=1)
        return Split.from_numpy("noise", tokens, self.noise_labels(data_seed), _origin_groups(0, self.k**2))


def _origin_groups(n_original: int, n_noise: int) -> dict[str, np.ndarray]:
    """Masks `original` / `noise` for n_original rows followed by n_noise rows, bool [batch]."""
    noise = np.concatenate([np.zeros(n_original, dtype=bool), np.ones(n_noise, dtype=bool)])
    return {"original": ~noise, "noise": noise}
