"""Study A's MPSP family: a sum-mod-m rule with a spurious max / first-element shortcut.

An example is a sequence of `n` integers in ``0..vocab-1`` followed by a readout token
``SEP = vocab``; the prediction is read at SEP. The true label is ``sum(x) mod m`` (m = 2 or
3); the shortcut is ``max(x) mod m`` ("max", magnitude-based) or ``x[0] mod m`` ("first",
positional). An example is *consistent* when its shortcut equals its label, *opposing*
otherwise.

The spurious ratio `r` is exact: the train split holds exactly ``round(r * n_train)``
consistent examples (Python's `round`, half to even), for any `r` in [0, 1], including below
chance (1/m). Inside each group the labels are balanced: the group's count is divided as
evenly as possible among the m labels, the remainder going to the smallest labels. The `val`
split is all consistent (r = 1) and `adv` all opposing (r = 0). The three splits are
disjoint, hold no duplicates, and are shuffled, deterministically per data seed.

Generation draws a pool of random sequences (or, for small sequence spaces, enumerates
every sequence in random order), removes duplicates, buckets the pool by (group, label) and
deals each bucket out to the splits; a short bucket draws more. If the space cannot supply
the requested counts, a `ConfigError` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from interp.config import check_choice, check_int, check_real, param, to_dict
from interp.errors import ConfigError
from tasks.seeding import generator

if TYPE_CHECKING:
    import torch

    from interp.splits import Split

LABELS: dict[str, int] = {"sum-mod2": 2, "sum-mod3": 3}
"""Label names and their modulus m."""

SHORTCUTS: tuple[str, ...] = ("max", "first")

# Small or densely requested sequence spaces are enumerated instead of sampled: exact, and a
# short bucket is then a real shortage rather than bad luck. Larger sparse spaces are sampled
# because enumerating them costs more than drawing a pool a little larger than needed.
_ENUMERATE_LIMIT = 1 << 16
_ENUMERATE_DENSITY = 4
_MAX_ROUNDS = 8
_MAX_DRAW = 1 << 22


@dataclass(frozen=True)
class MPSPTask:
    """Config of one MPSP task (study A)."""

    name: ClassVar[str] = "mpsp"
    split_names: ClassVar[tuple[str, ...]] = ("train", "val", "adv")  # what `splits` builds, in order
    # Study A: a run has *generalized* once adv accuracy reaches 100% at an evaluated epoch;
    # "kept" in the run summary says whether it still holds at the end (vs transient). On a
    # binary label the inverted shortcut also scores 100% on adv (every adv example opposes
    # the shortcut), so *rule* asks for val and adv at 100% at the same evaluation. *memorized*
    # (every opposing training example right) shows what a run did instead of the rule.
    # One wrong example in 2,048 misses a 100% milestone, so each has a 99% variant beside it
    # (reported with it; the study's 100% decides).
    milestones: ClassVar[dict[str, tuple[str | tuple[str, ...], float]]] = {
        "generalized": ("adv/acc", 1.0),
        "rule": (("val/acc", "adv/acc"), 1.0),
        "memorized": ("train/opposing/acc", 1.0),
        "generalized-99": ("adv/acc", 0.99),
        "rule-99": (("val/acc", "adv/acc"), 0.99),
    }

    label: str = param("sum-mod2", "True rule: sum-mod2 or sum-mod3 (the label is sum(x) mod m).")
    shortcut: str = param("max", "Spurious feature: max (max(x) mod m) or first (x[0] mod m).")
    r: float = param(
        0.9,
        "Spurious ratio: the exact fraction of training examples whose shortcut equals the label, in [0, 1].",
    )
    n: int = param(5, "Integers per example (before the readout token SEP), at least 2.")
    vocab: int = param(64, "Integers are drawn from 0..vocab-1 (SEP is vocab); at least m.")
    n_train: int = param(16384, "Training examples.")
    n_val: int = param(2048, "Validation examples (all shortcut-consistent).")
    n_adv: int = param(2048, "Adversarial examples (all shortcut-opposing).")

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_choice(owner, "label", self.label, LABELS)
        check_choice(owner, "shortcut", self.shortcut, SHORTCUTS)
        check_real(owner, "r", self.r, 0.0, 1.0)
        # n = 1 makes label and shortcut identical, so no opposing example could exist.
        check_int(owner, "n", self.n, 2)
        # Every residue mod m must be available as a token value.
        check_int(owner, "vocab", self.vocab, self.m)
        for field_name in ("n_train", "n_val", "n_adv"):
            check_int(owner, field_name, getattr(self, field_name), 0)

    @property
    def m(self) -> int:
        """The label modulus (2 or 3)."""
        return LABELS[self.label]

    @property
    def sep(self) -> int:
        """The readout token id."""
        return self.vocab

    @property
    def d_vocab(self) -> int:
        """Input vocabulary size: the integers plus SEP."""
        return self.vocab + 1

    @property
    def d_vocab_out(self) -> int:
        """Number of classes (m)."""
        return self.m

    @property
    def n_ctx(self) -> int:
        """Sequence length: n integers plus SEP."""
        return self.n + 1

    @property
    def n_examples(self) -> int:
        """Examples over all splits (what building them must hold in memory)."""
        return self.n_train + self.n_val + self.n_adv

    @property
    def n_consistent_train(self) -> int:
        """The exact number of shortcut-consistent training examples, ``round(r * n_train)``."""
        return int(round(self.r * self.n_train))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": "mpsp", **fields}``."""
        return {"name": self.name, **to_dict(self)}

    def splits(self, data_seed: int) -> dict[str, Split]:
        """Build the `train`, `val` and `adv` splits for `data_seed`.

        Returns:
            ``{"train", "val", "adv"}`` splits; tokens [batch, n + 1], labels [batch], groups
            `consistent` / `opposing`, extras `shortcut` and `argmax_pos` (int64 [batch]).

        Raises:
            ConfigError: If the sequence space cannot supply the requested counts.
        """
        rng = generator(data_seed, "mpsp", "pool")
        demand = self._demand()
        x, bucket = _draw_pool(self, rng, demand.sum(0))
        chunks = _deal(bucket, demand)
        out = {}
        for index, split_name in enumerate(self.split_names):
            rows = np.flatnonzero(chunks == index)
            rows = rows[rng.permutation(len(rows))]
            out[split_name] = mpsp_split(self, split_name, x[rows])
        return out

    def _demand(self) -> np.ndarray:
        """Return the wanted counts, int64 [3 splits, 2 * m buckets].

        Bucket ``g * m + y`` holds group g (0 consistent, 1 opposing) and label y.
        """
        consistent = (self.n_consistent_train, self.n_val, 0)
        opposing = (self.n_train - self.n_consistent_train, 0, self.n_adv)
        return np.stack(
            [
                np.concatenate([_balanced(c, self.m), _balanced(o, self.m)])
                for c, o in zip(consistent, opposing)
            ]
        )


def features(x: np.ndarray, m: int, shortcut: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compute label, shortcut and first argmax position of integer sequences.

    Args:
        x: Integer sequences without SEP, int64 [batch, n].
        m: Label modulus.
        shortcut: ``"max"`` or ``"first"``.

    Returns:
        ``(labels, shortcut, argmax_pos)``, each int64 [batch].
    """
    labels = x.sum(axis=1) % m
    # np.argmax returns the first occurrence, which is the documented argmax position.
    argmax_pos = x.argmax(axis=1)
    carrier = x.max(axis=1) if shortcut == "max" else x[:, 0]
    return labels, carrier % m, argmax_pos


def mpsp_split(
    task: MPSPTask, name: str, x: np.ndarray, extras: dict[str, torch.Tensor] | None = None
) -> Split:
    """Wrap integer sequences as a `Split`, computing labels, groups and extras.

    Args:
        task: The task the sequences belong to.
        name: The split's name.
        x: Integer sequences without SEP, int [batch, n].
        extras: Further extras to attach (first dimension [batch]).

    Returns:
        A split with tokens [batch, n + 1] (SEP appended), labels, groups `consistent` /
        `opposing`, and extras `shortcut`, `argmax_pos` plus `extras`.
    """
    from interp.splits import Split  # torch only where data is built: the config imports without it

    x = np.asarray(x, dtype=np.int64).reshape(-1, task.n)
    labels, shortcut, argmax_pos = features(x, task.m, task.shortcut)
    tokens = np.concatenate([x, np.full((len(x), 1), task.sep, dtype=np.int64)], axis=1)
    consistent = shortcut == labels
    split = Split.from_numpy(
        name,
        tokens,
        labels,
        {"consistent": consistent, "opposing": ~consistent},
        {"shortcut": shortcut, "argmax_pos": argmax_pos},
    )
    return Split(split.name, split.tokens, split.labels, split.groups, {**split.extras, **(extras or {})})


def _balanced(total: int, m: int) -> np.ndarray:
    """Split `total` among m labels as evenly as possible, remainder to the smallest labels."""
    counts = np.full(m, total // m, dtype=np.int64)
    counts[: total % m] += 1
    return counts


def _bucket(task: MPSPTask, x: np.ndarray) -> np.ndarray:
    """Return each sequence's bucket ``group * m + label``, int64 [batch]."""
    labels, shortcut, _ = features(x, task.m, task.shortcut)
    return (shortcut != labels).astype(np.int64) * task.m + labels


def _draw_pool(task: MPSPTask, rng: np.random.Generator, need: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return distinct sequences in random order, enough to fill every bucket.

    Args:
        task: The task.
        rng: The pool's generator.
        need: Wanted count per bucket, int64 [2 * m].

    Returns:
        ``(x, bucket)``: sequences int64 [pool, n] and their buckets int64 [pool].
    """
    space = task.vocab**task.n
    if need.sum() > space:
        raise ConfigError(
            f"MPSPTask asks for {int(need.sum())} distinct sequences but vocab={task.vocab}, n={task.n} "
            f"allow only {space}",
            "lower n_train / n_val / n_adv or raise vocab or n",
        )
    if space <= max(_ENUMERATE_LIMIT, _ENUMERATE_DENSITY * need.sum()):
        codes = rng.permutation(space)
        powers = task.vocab ** np.arange(task.n - 1, -1, -1, dtype=np.int64)
        x = (codes[:, None] // powers) % task.vocab
        bucket = _bucket(task, x)
        _check_supply(task, np.bincount(bucket, minlength=2 * task.m), need, exhaustive=True)
        return x, bucket
    x = np.empty((0, task.n), dtype=np.int64)
    draw = int(1.3 * need.sum()) + 256
    for _ in range(_MAX_ROUNDS):
        x = _unique_rows(np.concatenate([x, rng.integers(0, task.vocab, size=(draw, task.n))]))
        bucket = _bucket(task, x)
        have = np.bincount(bucket, minlength=2 * task.m)
        if np.all(have >= need):
            return x, bucket
        # Size the next draw by the bucket furthest behind, at its observed rate.
        rate = np.maximum(have, 1) / len(x)
        draw = min(int(1.3 * np.max(np.maximum(need - have, 0) / rate)) + 256, _MAX_DRAW)
    _check_supply(task, have, need, exhaustive=False)
    return x, bucket


def _check_supply(task: MPSPTask, have: np.ndarray, need: np.ndarray, *, exhaustive: bool) -> None:
    """Raise a `ConfigError` naming the first (group, label) bucket that is short."""
    for b in np.flatnonzero(have < need):
        group = "consistent" if b < task.m else "opposing"
        how = "exist" if exhaustive else "were found by sampling"
        raise ConfigError(
            f"MPSPTask(label={task.label!r}, shortcut={task.shortcut!r}, n={task.n}, vocab={task.vocab}) needs "
            f"{int(need[b])} distinct {group} sequences with label {b % task.m}, but only {int(have[b])} {how}",
            "the sequence space is too small: lower n_train / n_val / n_adv or raise vocab or n",
        )


def _unique_rows(x: np.ndarray) -> np.ndarray:
    """Drop repeated rows, keeping first occurrences in their original (random) order."""
    _, first = np.unique(x, axis=0, return_index=True)
    return x[np.sort(first)]


def _deal(bucket: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Assign pool rows to splits, bucket by bucket, in pool order.

    Args:
        bucket: Each pool row's bucket, int64 [pool].
        demand: Wanted counts, int64 [splits, buckets].

    Returns:
        The split index of each pool row, int64 [pool]; ``len(demand)`` marks unused rows.
    """
    order = np.argsort(bucket, kind="stable")
    starts = np.searchsorted(bucket[order], np.arange(demand.shape[1]))
    rank = np.empty_like(bucket)
    rank[order] = np.arange(len(bucket)) - starts[bucket[order]]
    ends = demand.cumsum(axis=0)  # [splits, buckets]
    return (rank[:, None] >= ends[:, bucket].T).sum(axis=1)
