"""Stop signals as a flag: handlers installed once, ignored signals left ignored, a supervisor watched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from interp.signals import SUPERVISOR_CHECK_S, ProcessId, request_stop, stop_on_signals, watch_supervisor


def test_a_signal_sets_the_flag_for_every_nested_context_until_the_outermost_ends():
    before = signal.getsignal(signal.SIGTERM)
    forwarded = []
    with stop_on_signals() as outer:
        with stop_on_signals(forward=forwarded.append) as inner:
            os.kill(os.getpid(), signal.SIGTERM)
            assert inner.signum == outer.signum == signal.SIGTERM and forwarded == [signal.SIGTERM]
        with stop_on_signals() as later:  # a run started after the signal stops at once
            assert later.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
    with stop_on_signals() as fresh:  # the next call starts afresh
        assert fresh.signum is None


def test_a_signal_ignored_at_the_start_stays_ignored():
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does
    try:
        with stop_on_signals() as stop:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.signum is None
            request_stop(signal.SIGINT)
            assert stop.signum == signal.SIGINT and stop.reason == "stopped by SIGINT"
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_the_end_of_the_supervising_process_stops_like_a_hangup(capfd):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with stop_on_signals() as stop:
            watch_supervisor(proc.pid)
            assert stop.signum is None and ProcessId.of(proc.pid).alive()
            proc.kill()
            proc.wait()
            deadline = time.monotonic() + SUPERVISOR_CHECK_S + 5
            while stop.signum is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stop.signum == signal.SIGHUP and stop.reason == f"its supervising process {proc.pid} ended"
    finally:
        watch_supervisor(None)
        proc.kill()
    assert f"its supervising process {proc.pid} ended; stopping at the next epoch" in capfd.readouterr().err
    assert not ProcessId.of(proc.pid).alive() and ProcessId.of(os.getpid()).alive()
