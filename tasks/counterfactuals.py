"""Counterfactual partners of MPSP examples, for activation patching (study A).

`counterfactual(task, split, flip)` returns a split aligned 1:1 with `split`: row i is a
minimal edit of row i that changes one feature and keeps the other.

``flip="label"`` changes exactly ONE position; the label changes, the shortcut does not.

- "first" shortcut: any position except 0 gets a value of another residue mod m.
- "max" shortcut: any position except the first argmax gets a value of another residue mod m
  that is at most the max, so the max value is unchanged. Edits that also keep the max's
  first position (values strictly below the max before it) are preferred; only an example
  without such an edit gets one that moves the first argmax to an earlier tie.

``flip="shortcut"`` changes exactly TWO positions; the shortcut changes, the label does not.
The shortcut-carrying position (position 0 for "first", the first argmax for "max") gets a
value s' of another residue, and one other position j compensates, so ``sum(x) mod m`` is
kept: ``x_j' = x_j - (s' - s) (mod m)``. For "max", the edit is preferably one where s' becomes
the new maximum at the same first position (every other element, the compensating one
included, at most s', and strictly below it before it). Where no such edit exists, s' may
become the max at a later first position, or fall below the largest untouched element, which
then carries a max of another residue (this only helps for tiny values). The partner's
``argmax_pos`` extra says where the max ended up.

Partners are drawn uniformly among all valid edits (for ``flip="shortcut"``: among every
(compensating position, new carrier value, compensating value) of the preferred kind, so an edit
with few compensating values is not drawn more often), from `seed` (and the flip and split
name), never from global RNG state. Some examples have no valid edit; their partner is the
example itself and the extra ``valid`` is False. For "first" a partner always exists (n >= 2,
vocab >= m). For "max" (and vocab >= 3) none exists exactly when (label flip) every element
is 0, or (shortcut flip) at least three elements hold the top value ``vocab - 1``: no edit of
any two positions can then change the max. At the default settings (vocab 64, n 5) that is
about 4e-5 of examples; filter on ``valid`` before patching. The tests check by brute force
that an invalid row truly has no partner.
"""

from __future__ import annotations

import numpy as np
import torch

from interp.errors import ConfigError, did_you_mean
from interp.splits import Split
from tasks.mpsp import MPSPTask, mpsp_split
from tasks.seeding import generator

FLIPS: tuple[str, ...] = ("label", "shortcut")


def counterfactual(task: MPSPTask, split: Split, flip: str = "label", seed: int = 0) -> Split:
    """Build the counterfactual partner of every example of an MPSP split.

    Args:
        task: The task `split` belongs to.
        split: Any split of `task` (or any sequences of its shape), tokens [batch, n + 1].
        flip: ``"label"`` (change the label, keep the shortcut: one position edited) or
            ``"shortcut"`` (change the shortcut, keep the label: two positions edited).
        seed: Seed of the random choice among valid edits.

    Returns:
        A split named ``f"{split.name}/cf-{flip}"`` aligned 1:1 with `split`, with groups and
        extras recomputed, plus extras ``valid`` (bool [batch]: a partner exists; else the row
        is a copy of the example) and ``changed`` (bool [batch, n + 1]: the edited positions).

    Raises:
        ConfigError: On an unknown `flip` or a split whose shape or tokens do not fit `task`.
    """
    if flip not in FLIPS:
        raise ConfigError(f"counterfactual flip {flip!r} is not valid", did_you_mean(str(flip), FLIPS))
    x = _sequences(task, split)
    rng = generator(seed, "mpsp", "counterfactual", flip, split.name)
    edit = _flip_label if flip == "label" else _flip_shortcut
    partner, valid = edit(task, x, rng)
    changed = np.zeros((len(x), task.n_ctx), dtype=bool)
    changed[:, : task.n] = partner != x
    extras = {"valid": torch.from_numpy(valid), "changed": torch.from_numpy(changed)}
    return mpsp_split(task, f"{split.name}/cf-{flip}", partner, extras)


def _sequences(task: MPSPTask, split: Split) -> np.ndarray:
    """Return the integers of `split` without SEP, int64 [batch, n], after checking them."""
    tokens = split.tokens.detach().cpu().numpy().astype(np.int64)
    if tokens.shape[1] != task.n_ctx or np.any(tokens[:, -1] != task.sep):
        raise ConfigError(
            f"split {split.name!r} does not fit {task!r}",
            f"expected tokens [batch, {task.n_ctx}] ending with SEP={task.sep}, got {tuple(tokens.shape)}",
        )
    x = tokens[:, :-1]
    if x.size and (x.min() < 0 or x.max() >= task.vocab):
        raise ConfigError(f"split {split.name!r} holds integers outside 0..{task.vocab - 1}")
    return x


def _carrier(task: MPSPTask, x: np.ndarray) -> np.ndarray:
    """Position carrying the shortcut: first argmax ("max") or 0 ("first"), int64 [batch]."""
    return x.argmax(axis=1) if task.shortcut == "max" else np.zeros(len(x), dtype=np.int64)


def _choose(
    ok: np.ndarray, rng: np.random.Generator, weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pick one True entry per row, uniformly or with probability proportional to `weight`.

    Args:
        ok: Valid edits, bool [batch, n, vocab] (position j, value v).
        rng: Generator.
        weight: Positive weight of each entry, [batch, n, vocab] (None: all equal).

    Returns:
        ``(j, v, valid)``: chosen position and value (int64 [batch], arbitrary where not
        valid) and whether the row had any valid edit (bool [batch]).
    """
    batch, n, vocab = ok.shape
    if weight is None:
        scores = np.where(ok, rng.random(ok.shape, dtype=np.float32), -1.0)
    else:
        # Exponential race: the entry with the smallest E_i / w_i (E_i ~ Exp(1)) wins with
        # probability w_i / sum(w); negated so the winner is the argmax.
        race = -rng.exponential(size=ok.shape) / np.maximum(weight, 1)
        scores = np.where(ok, race, -np.inf)
    scores = scores.reshape(batch, n * vocab)
    flat = scores.argmax(axis=1)
    return flat // vocab, flat % vocab, ok.reshape(batch, n * vocab).any(axis=1)


def _flip_label(task: MPSPTask, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Edit one non-carrier position to another residue; returns (partner [batch, n], valid)."""
    a = _carrier(task, x)[:, None, None]
    pos = np.arange(task.n)[None, :, None]
    val = np.arange(task.vocab)[None, None, :]
    ok = (pos != a) & ((val - x[:, :, None]) % task.m != 0)
    if task.shortcut == "max":
        top = x.max(axis=1)[:, None, None]
        # Keeping the max value is required; keeping its first position is preferred (values
        # strictly below the max before it), falling back where that is impossible.
        ok, _ = _prefer(ok & (val <= top - (pos < a)), ok & (val <= top))
    j, v, valid = _choose(ok, rng)
    partner = x.copy()
    rows = np.flatnonzero(valid)
    partner[rows, j[rows]] = v[rows]
    return partner, valid


def _prefer(strict: np.ndarray, relaxed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the `strict` edits if there are any, else the `relaxed` ones.

    Args:
        strict: Preferred edits, bool [batch, n, vocab].
        relaxed: Acceptable edits (a superset), bool [batch, n, vocab].

    Returns:
        ``(ok, use_strict)``: the edits to choose from, bool [batch, n, vocab], and whether
        the row uses the strict ones, bool [batch, 1, 1].
    """
    use_strict = strict.reshape(len(strict), strict.shape[1] * strict.shape[2]).any(axis=1)[:, None, None]
    return np.where(use_strict, strict, relaxed), use_strict


def _flip_shortcut(task: MPSPTask, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Change the carrier to another residue and compensate at one other position.

    Returns:
        ``(partner, valid)``: int64 [batch, n] and bool [batch].
    """
    batch = len(x)
    a = _carrier(task, x)
    old = x[np.arange(batch), a][:, None, None]
    pos = np.arange(task.n)[None, :, None]
    new = np.arange(task.vocab)[None, None, :]  # candidate new carrier value s'
    ok = (pos != a[:, None, None]) & ((new - old) % task.m != 0)
    residue = (x[:, :, None] - (new - old)) % task.m  # the compensating value's residue
    if task.shortcut == "max":
        before, after = _others_max(x, a)
        # Preferred: s' becomes the max at the same first position (elements before it
        # strictly below s', after it at most s'), the compensator included.
        strict_top = new - (pos < a[:, None, None])
        strict = ok & (new > before[:, :, None]) & (new >= after[:, :, None]) & (residue <= strict_top)
        # Otherwise: the new max T is s' or, if s' is lower, the largest untouched element;
        # T must change residue and the compensator must fit below it.
        relaxed_top = np.maximum(new, np.maximum(before, after)[:, :, None])
        relaxed = ok & ((relaxed_top - old) % task.m != 0) & (residue <= relaxed_top)
        ok, use_strict = _prefer(strict, relaxed)
        top = np.where(use_strict, strict_top, relaxed_top)
    else:
        top = np.full(ok.shape, task.vocab - 1)
        ok &= residue <= top
    # Each (j, s') admits `count` compensating values: weighting (j, s') by it, then drawing the
    # value uniformly, makes every valid edit (j, s', value) equally likely.
    count = np.where(ok, (top - residue) // task.m + 1, 0)
    j, s, valid = _choose(ok, rng, weight=count)
    rows = np.flatnonzero(valid)
    j, s = j[rows], s[rows]
    top_c = top[rows, j, s]
    res_c = residue[rows, j, s]
    # Uniform among values in 0..top_c with the required residue.
    count = (top_c - res_c) // task.m + 1
    k = np.minimum((rng.random(len(rows)) * count).astype(np.int64), count - 1)
    partner = x.copy()
    partner[rows, a[rows]] = s
    partner[rows, j] = res_c + k * task.m
    return partner, valid


def _others_max(x: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max of the untouched elements before and after the carrier, for each compensator j.

    Args:
        x: Sequences, int64 [batch, n].
        a: Carrier position, int64 [batch].

    Returns:
        ``(before, after)``, each int64 [batch, n (j)]: the max over positions k not in
        {a, j} with k < a (resp. k > a), or -1 if there are none.
    """
    n = x.shape[1]
    j = np.arange(n)[None, :, None]
    k = np.arange(n)[None, None, :]
    a3 = a[:, None, None]
    values = np.broadcast_to(x[:, None, :], (len(x), n, n))
    before = np.where((k < a3) & (k != j), values, -1).max(axis=2)
    after = np.where((k > a3) & (k != j), values, -1).max(axis=2)
    return before, after
