"""Memory a run needs, estimated before anything is allocated: refuse up front, not die later.

A task of a billion examples or a model of a billion parameters would otherwise be killed by
the kernel (or fail deep inside the data builder) minutes into a run. `check_memory` adds up
what training holds at once and compares it with the memory available now (Linux
``/proc/meminfo``'s MemAvailable; elsewhere the physical memory):

* data: ``n_examples * n_ctx`` int64 tokens, times `DATA_OVERHEAD` (the split builders hold
  several int64 copies of their candidates while drawing disjoint examples);
* model: parameters, their gradients and AdamW's two moments (4 float32 copies) per seed;
* activations: ``batch * n_ctx * d_model * n_layers`` float32 values, times
  `ACTIVATION_OVERHEAD` (the residual stream, attention, MLP and their gradients).

The estimate is deliberately rough (within a small factor); it exists to refuse what cannot
fit, so it only refuses when the estimate exceeds what is available.

`keep_freed_memory` is the other side of memory: how the process's allocator treats what a
training step frees (a process-wide setting, turned on by whatever trains: `interp train`,
sweeps' workers, long experiment loops, the benchmarks).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

from interp.errors import ConfigError

DATA_OVERHEAD = 8
ACTIVATION_OVERHEAD = 16
GB = 1024**3


def available_bytes() -> int:
    """Memory available to a new allocation now, in bytes."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimate_bytes(task: Any, model_cfg: Any, n_params: int, batch_size: int | None, seeds: int = 1) -> dict:
    """The estimate's parts in bytes: ``{"data", "model", "activations"}``.

    Args:
        task: A task config with `n_ctx` and (optionally) `n_examples`.
        model_cfg: The model config (its `d_model`, `n_layers` if it has them).
        n_params: The model's parameter count.
        batch_size: Examples per step (None: full batch, i.e. the train split, bounded by `n_examples`).
        seeds: Models trained at once (vectorised seeds).
    """
    n_examples = int(getattr(task, "n_examples", 0))
    n_ctx = int(task.n_ctx)
    batch = batch_size or n_examples
    width = int(getattr(model_cfg, "d_model", 0) or getattr(model_cfg, "d_hidden", 0) or 1)
    layers = int(getattr(model_cfg, "n_layers", 1) or 1)
    return {
        "data": n_examples * n_ctx * 8 * DATA_OVERHEAD,
        "model": n_params * 4 * 4 * seeds,
        "activations": batch * n_ctx * width * layers * 4 * ACTIVATION_OVERHEAD * seeds,
    }


def check_memory(
    task: Any,
    model_cfg: Any,
    n_params: int,
    batch_size: int | None,
    seeds: int = 1,
    available: int | None = None,
) -> None:
    """Refuse a run whose estimated memory exceeds what is available.

    Raises:
        ConfigError: Naming the estimate (and its parts) and the memory available.
    """
    parts = estimate_bytes(task, model_cfg, n_params, batch_size, seeds)
    total = sum(parts.values())
    free = available_bytes() if available is None else available
    if total > free:
        detail = ", ".join(f"{k} {v / GB:.1f} GB" for k, v in parts.items())
        sizes = f"{getattr(task, 'n_examples', '?')} examples, {n_params} parameters"
        raise ConfigError(
            f"this run needs about {total / GB:.1f} GB of memory ({detail}; {sizes}), "
            f"but {free / GB:.1f} GB are available",
            "lower the task's sizes (e.g. --n-train), the model, or --batch-size",
        )


def keep_freed_memory() -> bool:
    """Make glibc malloc keep freed memory instead of returning it to the OS (process-wide).

    Training steps allocate and free the same large activation buffers every step. glibc serves
    blocks over its mmap threshold (at most 32 MiB) with fresh `mmap`s, so every step pays page
    faults on tens of MB. This sets `M_MMAP_MAX = 0` (no mmap'd blocks) and a huge
    `M_TRIM_THRESHOLD` (never trim the heap), so buffers are reused: the effect tcmalloc or
    jemalloc would give, with no dependency. Returns False where glibc's `mallopt` is absent.
    """
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**30))
