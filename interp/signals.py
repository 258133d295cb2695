"""Stopping on signals: SIGINT, SIGTERM and SIGHUP become a flag that long loops check at safe points.

A process that trains (one run, or a sweep's worker) or supervises workers (a sweep) installs
its handlers once, in the outermost `stop_on_signals` of its main thread; nested ones share
them, so a signal that arrives between two runs still stops the next one before it trains. A
signal whose handler was ``SIG_IGN`` when the handlers were installed (``nohup`` ignores
SIGHUP, and so do the processes it starts) stays ignored.

A worker also watches the process that supervises it (`watch_supervisor`): when that process
ends without a signal reaching the worker (``kill -9`` of a sweep), the flag is set as if by
SIGHUP, the hang-up of its controlling process, so that no run trains unsupervised.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals that stop training at the next epoch boundary (exit code 128 + the number)."""

SUPERVISOR_CHECK_S = 0.5
"""How often (seconds) `StopFlag.signum` looks whether the supervising process still lives."""


@dataclass(frozen=True)
class ProcessId:
    """A process by pid and start time, so that a later process given the same pid is not it."""

    pid: int
    start: str | None = None

    @classmethod
    def of(cls, pid: int) -> ProcessId:
        """The process `pid` as it is now (its start time where /proc tells it)."""
        return cls(pid, _start_time(pid))

    def alive(self) -> bool:
        """Whether this process still runs (a zombie, ended but not yet reaped, does not)."""
        stat = _proc_stat(self.pid)
        if stat is not None:
            state, start = stat
            return state not in ("Z", "X") and (self.start is None or start == self.start)
        try:  # no /proc entry: gone on Linux; elsewhere (macOS) ask the kernel
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of `pid` from /proc/PID/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], fields[19]  # stat fields 3 (state) and 22 (starttime)


def _start_time(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


@dataclass
class _State:
    """What the process's stop handlers share (one per process; main thread only)."""

    depth: int = 0
    signum: int | None = None
    reason: str | None = None
    previous: dict[int, object] = field(default_factory=dict)
    forwards: list[Callable[[int], None]] = field(default_factory=list)
    supervisor: ProcessId | None = None
    next_check: float = 0.0


_STATE = _State()


class StopFlag:
    """Whether to stop: `signum` is the first stop signal received, None while there was none.

    In a worker whose supervisor has ended (`watch_supervisor`), `signum` becomes SIGHUP; it
    looks at most every `SUPERVISOR_CHECK_S` seconds, so checking it at every step is cheap.
    """

    @property
    def signum(self) -> int | None:
        """The stop signal received (None: go on)."""
        if _STATE.signum is None and _STATE.supervisor is not None:
            _check_supervisor()
        return _STATE.signum

    @property
    def reason(self) -> str | None:
        """Why the flag is set, in words (None while it is not)."""
        return _STATE.reason if self.signum is not None else None


def _check_supervisor() -> None:
    now = time.monotonic()
    if now < _STATE.next_check:
        return
    _STATE.next_check = now + SUPERVISOR_CHECK_S
    supervisor = _STATE.supervisor
    if supervisor is not None and not supervisor.alive():
        _STATE.signum = signal.SIGHUP if hasattr(signal, "SIGHUP") else signal.SIGTERM
        _STATE.reason = f"its supervising process {supervisor.pid} ended"
        print(
            f"interp worker {os.getpid()}: {_STATE.reason}; stopping at the next epoch with a checkpoint",
            file=sys.stderr,
            flush=True,
        )


def watch_supervisor(pid: int | None) -> None:
    """Stop (as on SIGHUP) once process `pid` ends; None stops watching.

    Called in a worker process with its sweep's pid, while that process still lives.
    """
    _STATE.supervisor = None if pid is None else ProcessId.of(pid)
    _STATE.next_check = 0.0


def request_stop(signum: int, reason: str | None = None) -> None:
    """Set the flag as a stop signal would, and pass it on to the registered forwards."""
    if _STATE.signum is None:
        _STATE.signum = signum
        _STATE.reason = reason or f"stopped by {signal.Signals(signum).name}"
    for forward in list(_STATE.forwards):
        forward(signum)


def _handler(signum: int, frame: object) -> None:
    request_stop(signum)


@contextlib.contextmanager
def stop_on_signals(forward: Callable[[int], None] | None = None) -> Iterator[StopFlag]:
    """Turn SIGINT / SIGTERM / SIGHUP into a flag checked at safe points (main thread only).

    Args:
        forward: Called with the signal number on every stop signal while this context is open
            (a sweep passes each one on to its workers). It runs inside the signal handler:
            it must be quick and must not raise.

    Yields:
        The process's `StopFlag`. Outside the main thread no handler can be installed, and the
        flag is set only by a supervisor's end.
    """
    if threading.current_thread() is not threading.main_thread():
        yield StopFlag()
        return
    if _STATE.depth == 0:
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current is not signal.SIG_IGN:  # ignored at the start (nohup): stays ignored
                _STATE.previous[signum] = current
                signal.signal(signum, _handler)
    _STATE.depth += 1
    if forward is not None:
        _STATE.forwards.append(forward)
    try:
        yield StopFlag()
    finally:
        if forward is not None:
            _STATE.forwards.remove(forward)
        _STATE.depth -= 1
        if _STATE.depth == 0:
            for signum, previous in _STATE.previous.items():
                signal.signal(signum, previous)
            _STATE.previous.clear()
            _STATE.signum = _STATE.reason = None
