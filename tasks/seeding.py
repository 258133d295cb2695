"""Random streams derived from a data seed.

Every task builds its splits from local `numpy.random.Generator`s, never from global RNG
state, so the same `(config, data_seed)` always gives the same tensors. Each purpose (the
MPSP pool, the train/test partition, the label corruption, ...) gets its own stream, so
changing how one is consumed never shifts another: for instance the corrupted set of
study C depends on the seed only, not on how the partition was drawn.
"""

from __future__ import annotations

import zlib

import numpy as np

from interp.errors import ConfigError


def generator(data_seed: int, *purpose: str) -> np.random.Generator:
    """Return a generator for one purpose, seeded from `data_seed` only.

    Args:
        data_seed: A non-negative integer seed.
        purpose: Names of the stream (e.g. ``"modadd", "partition"``); different names give
            independent streams for the same seed.

    Returns:
        A fresh `numpy.random.Generator`.

    Raises:
        ConfigError: If `data_seed` is not a non-negative integer.
    """
    if isinstance(data_seed, bool) or not isinstance(data_seed, (int, np.integer)) or data_seed < 0:
        raise ConfigError(f"data seed {data_seed!r} is invalid", "use a non-negative integer")
    # crc32, not hash(): Python's str hash is salted per process, which would break determinism.
    tags = [zlib.crc32(p.encode()) for p in purpose]
    return np.random.default_rng(np.random.SeedSequence([int(data_seed), *tags]))
