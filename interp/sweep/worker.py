"""A sweep's worker process: ``python -m interp.sweep.worker IN_FD OUT_FD SUPERVISOR_PID``.

Started by `interp.sweep.pool.WorkerPool`. It reads ``(fn, item, threads)`` tasks from IN_FD
and writes one `Outcome` per task to OUT_FD, until it reads None or the end of the pipe (its
pool closed it, or its sweep process died). Stop signals (`interp.signals`) are caught from the
first moment: a run in training saves a checkpoint at its next epoch boundary, reports itself
interrupted, and the worker exits. So does a run whose sweep process ended without a signal
(``kill -9``), seen by watching SUPERVISOR_PID.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any

from interp.signals import StopFlag, stop_on_signals, watch_supervisor


def serve(inbox: Connection, outbox: Connection, stop: StopFlag) -> None:
    """Run tasks from `inbox`, each outcome to `outbox`, until told to stop or the pipe ends."""
    from interp.sweep.outcome import Outcome, call_reporting

    while True:
        try:
            task: Any = inbox.recv()
        except (EOFError, OSError):
            return  # the pool closed the pipe, or the sweep process died
        except Exception as err:  # noqa: BLE001 - e.g. a function this process cannot import
            outbox.send(Outcome(None, error=f"{type(err).__name__}: {err}"))
            continue
        if task is None:
            return
        fn, item, threads = task
        if stop.signum is not None:  # stopped while idle: this task never starts
            outcome = Outcome(item, error=f"{stop.reason} before it started", interrupted=stop.signum)
        else:
            outcome = call_reporting(fn, item, threads, in_worker=True)
        try:
            outbox.send(outcome)
        except (BrokenPipeError, OSError):
            return  # nobody listens any more: the checkpoint is saved, nothing else to do
        except Exception as err:  # noqa: BLE001 - a value that cannot be pickled
            outbox.send(Outcome(item, error=f"its result cannot be sent back: {type(err).__name__}: {err}"))
        if outcome.interrupted is not None:
            return


def main(argv: list[str]) -> None:
    """Serve tasks on the pipes named in `argv` (``IN_FD OUT_FD SUPERVISOR_PID``)."""
    with stop_on_signals() as stop:  # before anything slow, so that no stop signal is lost
        in_fd, out_fd, supervisor = (int(a) for a in argv)
        watch_supervisor(supervisor)
        inbox = Connection(in_fd, readable=True, writable=False)
        outbox = Connection(out_fd, readable=False, writable=True)
        try:
            serve(inbox, outbox, stop)
        finally:
            inbox.close()
            outbox.close()


if __name__ == "__main__":
    main(sys.argv[1:])
    # Exit at once: the run's files are closed and synced, and the interpreter's teardown
    # (torch's exit handlers among it) takes seconds on a busy machine, seconds in which the
    # sweep would wait for a worker that has nothing left to do.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
