"""Where the runs of a sweep execute: local processes (joblib) or a cluster (submitit).

One small interface: `executor.map(fn, items)` yields `Outcome(item, value, error)` as each item
finishes, in any order. A failing item is reported in its outcome and never stops the
others. `fn` and the items must be picklable (module-level functions, plain dataclasses).

* `LocalExecutor`: joblib processes on this machine, sharing its cores.
* `SubmititExecutor`: Slurm job arrays through submitit (the optional ``cluster`` extra), or
  submitit's own local/debug executors.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What became of one item: its value, or the error that stopped it."""

    item: T
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor(Protocol):
    """Runs `fn` over items, yielding an `Outcome` per item as it finishes."""

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[Outcome[T]]: ...


def _call_reporting(fn: Callable[[T], Any], item: T, threads: int | None) -> Outcome[T]:
    """Run one item in a worker, turning any exception into a reported outcome."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        return Outcome(item, fn(item))
    except Exception as err:  # noqa: BLE001 - one failing run must not stop the others
        return Outcome(item, error=f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}")


@dataclass(frozen=True)
class LocalExecutor:
    """Run items in separate local processes with joblib.

    Attributes:
        jobs: Processes at once (default: one per core, at most one per item).
        threads: torch threads per process (default: cores // jobs, at least 1).
    """

    jobs: int | None = None
    threads: int | None = None

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[Outcome[T]]:
        from joblib import Parallel, delayed

        cores = os.cpu_count() or 1
        jobs = max(1, min(self.jobs or cores, len(items) or 1))
        threads = self.threads or max(1, cores // jobs)
        if jobs == 1:  # no worker processes: simpler to debug, same results
            yield from (_call_reporting(fn, item, threads) for item in items)
            return
        parallel = Parallel(n_jobs=jobs, return_as="generator_unordered")
        yield from parallel(delayed(_call_reporting)(fn, item, threads) for item in items)
