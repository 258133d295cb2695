"""The worker processes of `LocalExecutor`: each trains one item at a time and stops with its sweep.

Not joblib/loky, for three reasons a sweep cannot live with: when one loky worker dies, loky
kills every other one mid-run (SIGKILL) and raises a many-line error; a signal to the parent
reaches none of the workers, which train on as orphans; and loky's reusable executor keeps idle
processes after the sweep. Here:

* each worker is ``python -m interp.sweep.worker`` (`interp.sweep.worker`), fed through a pipe,
  watching this process's pid so that it stops if this process dies without a signal;
* a worker that dies without a result (killed, out of memory, a crash in C) becomes that
  item's error outcome naming the signal or exit code; the other workers go on, and a new
  worker takes the dead one's place;
* `forward` passes a stop signal on to every worker that has an item;
* `close` ends every worker: idle ones at once, busy ones by SIGTERM (a checkpoint at their
  next epoch boundary), and SIGKILL only after `grace_s`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from interp.sweep.outcome import Outcome


@dataclass
class _Worker:
    """One worker process, its two pipe ends, and the item it has (None: idle)."""

    proc: subprocess.Popen
    inbox: Connection  # this process writes tasks here
    outbox: Connection  # and reads outcomes here
    item: Any = None
    busy: bool = False


def _child_env() -> dict[str, str]:
    """This process's environment with its import path, so that workers import the same modules."""
    path = [os.path.abspath(p or os.curdir) for p in sys.path]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}


def died(proc: subprocess.Popen) -> str:
    """What became of a worker process that ended without a result, in words."""
    code = proc.wait()
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"its worker process {proc.pid} was killed by {name}"
    return f"its worker process {proc.pid} exited with code {code} without a result"


class WorkerPool:
    """Worker processes that run ``fn(item)`` one item at a time each (see the module docstring)."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.workers: list[_Worker] = []
        self.idle_deaths: list[str] = []
        self._env = _child_env()

    def start(self) -> None:
        """Start one more (idle) worker."""
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "interp.sweep.worker",
                    str(task_read),
                    str(result_write),
                    str(os.getpid()),
                ],
                pass_fds=(task_read, result_write),
                stdin=subprocess.DEVNULL,
                env=self._env,
            )
        finally:
            os.close(task_read)
            os.close(result_write)
        self.workers.append(
            _Worker(proc, Connection(task_write, readable=False), Connection(result_read, writable=False))
        )

    def idle(self) -> list[_Worker]:
        """The workers without an item."""
        return [w for w in self.workers if not w.busy]

    def busy(self) -> int:
        """How many workers have an item."""
        return sum(w.busy for w in self.workers)

    def give(self, worker: _Worker, fn: Callable[[Any], Any], item: Any) -> None:
        """Hand `item` to an idle `worker`."""
        worker.item, worker.busy = item, True
        try:
            worker.inbox.send((fn, item, self.threads))
        except OSError:
            pass  # it died meanwhile: `results` reports the item

    def results(self, timeout: float) -> Iterator[Outcome]:
        """The outcomes that arrive within `timeout` seconds, and those of workers that died."""
        ready = wait([w.outbox for w in self.workers], timeout)
        for worker in [w for w in self.workers if w.outbox in ready]:
            try:
                outcome = worker.outbox.recv()
            except (EOFError, OSError):  # the worker ended
                self._remove(worker)
                if worker.busy:
                    yield Outcome(worker.item, error=died(worker.proc))
                elif worker.proc.returncode != 0:  # not a worker that stopped on a signal
                    self.idle_deaths.append(died(worker.proc))
                continue
            item, worker.item, worker.busy = worker.item, None, False
            yield Outcome(item, outcome.value, outcome.error, outcome.busy, interrupted=outcome.interrupted)

    def check_starts(self, most: int = 4) -> None:
        """Refuse to go on starting workers that end before taking an item (a broken install).

        Raises:
            RuntimeError: Once more than `most` workers have ended idle.
        """
        if len(self.idle_deaths) > most:
            raise RuntimeError(
                f"sweep worker processes end as they start ({self.idle_deaths[-1]}); "
                f"try `{sys.executable} -m interp.sweep.worker` to see why"
            )

    def _remove(self, worker: _Worker) -> None:
        self.workers.remove(worker)  # first: the signal handler must not see a reaped pid
        worker.inbox.close()
        worker.outbox.close()
        worker.proc.wait()

    def forward(self, signum: int) -> None:
        """Stop every busy worker's run at its next epoch boundary (safe in a signal handler).

        Workers are sent SIGTERM whatever `signum` was: it stops a run as well, and a worker
        still starting up, before its handlers, exits quietly on it (SIGINT would print a
        traceback). This process exits with its own signal's code.
        """
        for worker in list(self.workers):
            if worker.busy and worker.proc.returncode is None:
                try:
                    os.kill(worker.proc.pid, signal.SIGTERM)
                except OSError:
                    pass

    def close(self, grace_s: float = 120.0) -> None:
        """End every worker and wait for it: idle ones at once, busy ones by SIGTERM, then SIGKILL.

        Busy workers stop at their next epoch boundary with a checkpoint; one still alive after
        `grace_s` seconds is killed (its run resumes from its last checkpoint).
        """
        for worker in self.workers:
            worker.inbox.close()  # an idle worker reads the end of the pipe and exits
            if worker.busy:
                self._signal(worker, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for worker in list(self.workers):
            try:
                worker.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(worker, signal.SIGKILL)
                worker.proc.wait()
            worker.outbox.close()
        self.workers.clear()

    @staticmethod
    def _signal(worker: _Worker, signum: int) -> None:
        try:
            worker.proc.send_signal(signum)
        except OSError:
            pass
