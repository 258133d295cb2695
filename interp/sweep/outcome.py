"""What became of one item of a sweep (`Outcome`), and running one item so that it becomes one.

Both executors (`interp.sweep.executors`) and their worker processes (`interp.sweep.pool`,
`interp.sweep.worker`) speak in outcomes; they live here so that each imports them without
importing the other.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from interp.errors import RunBusyError, TrainingInterrupted

T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What became of one item: its value, or the error that stopped it.

    ``busy`` marks an item whose run folder another live process holds (`interp.errors.RunBusyError`):
    not a failure, the sweep waits for that process and takes its result (`elsewhere`).
    ``interrupted`` is the signal that stopped the item's run after it saved a checkpoint.
    """

    item: T
    value: Any = None
    error: str | None = None
    busy: bool = False
    elsewhere: bool = False
    interrupted: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the item finished without an error."""
        return self.error is None


def call_reporting(
    fn: Callable[[T], Any], item: T, threads: int | None, *, in_worker: bool = False
) -> Outcome[T]:
    """Run one item, turning any exception into a reported outcome.

    A run stopped by a signal (`TrainingInterrupted`, after its checkpoint) is raised on in
    this process, and reported as ``interrupted`` from a worker (`in_worker`).
    """
    if threads:
        import torch

        torch.set_num_threads(threads)
    try:
        return Outcome(item, fn(item))
    except TrainingInterrupted as err:
        if not in_worker:
            raise  # in this process a stop signal stops the whole sweep
        return Outcome(item, error=str(err), interrupted=err.signum)
    except RunBusyError as err:  # another sweep trains it now: not a failure
        return Outcome(item, error=str(err), busy=True)
    except Exception as err:  # noqa: BLE001 - one failing run must not stop the others
        return Outcome(item, error=f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=-3)}")
