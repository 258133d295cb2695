"""Where the runs of a sweep execute: local worker processes or a cluster (submitit).

One small interface: `executor.map(fn, items)` yields `Outcome(item, value, error)` as each item
finishes, in any order. A failing item is reported in its outcome and never stops the
others. `fn` and the items must be picklable (module-level functions, plain dataclasses).

* `LocalExecutor`: worker processes on this machine, sharing its cores (`interp.sweep.pool`).
* `SubmititExecutor`: Slurm job arrays through submitit (the optional ``cluster`` extra), or
  submitit's own local/debug executors.

Stopping: SIGINT, SIGTERM or SIGHUP to this process (unless ignored from the start, as
``nohup`` ignores SIGHUP) is passed on to every running item; each run saves a checkpoint at
its next epoch boundary, every worker exits, no new item starts, and `map` raises
`interp.errors.RunsInterrupted` (or, in this process, the run's `TrainingInterrupted`). Local
workers also stop by themselves if this process dies without a signal (`kill -9`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

from interp.errors import RunsInterrupted
from interp.signals import STOP_SIGNALS, stop_on_signals, watch_supervisor
from interp.sweep.outcome import Outcome, call_reporting

T = TypeVar("T")


@runtime_checkable
class Executor(Protocol):
    """Runs `fn` over items, yielding an `Outcome` per item as it finishes."""

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[Outcome[T]]:
        """Run `fn` on every item; yield each outcome as it finishes."""


@dataclass(frozen=True)
class LocalExecutor:
    """Run items in separate local worker processes (`interp.sweep.pool`).

    Attributes:
        jobs: Processes at once (default: one per core, at most one per item).
        threads: torch threads per process (default: `default_threads`).
    """

    jobs: int | None = None
    threads: int | None = None

    def jobs_for(self, n_items: int) -> int:
        """The processes `map` runs `n_items` items in (1: this process, no workers)."""
        return max(1, min(self.jobs or os.cpu_count() or 1, n_items or 1))

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[Outcome[T]]:
        """Run `fn` on every item in worker processes; yield outcomes as they finish.

        A worker that dies without a result (killed, out of memory) is its item's error
        outcome; the other workers go on and a new one takes its place. Every worker has
        exited when this returns or raises.

        Raises:
            RunsInterrupted: After a stop signal, once every running item has stopped.
        """
        jobs = self.jobs_for(len(items))
        threads = self.threads or default_threads(jobs)
        if jobs == 1:  # no worker processes: simpler to debug, same results
            yield from _in_process(fn, items, threads)
            return
        yield from _in_workers(fn, items, jobs, threads)


def default_threads(jobs: int) -> int:
    """The torch threads a process gets when none are given: ``OMP_NUM_THREADS`` if set to a
    positive integer (the user's own limit, which torch would honour by itself), else the cores
    shared among `jobs` processes, at least 1.

    Why the variable wins: on cores another job is using, two threads a run can cost many times
    one (a 0.03 CPU s epoch of the quadratic MLP took 0.4 with its second thread waiting), and a
    user who set the variable asked for what they set.
    """
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, (os.cpu_count() or 1) // jobs)


def in_this_process(executor: Executor, n_items: int) -> bool:
    """Whether `executor` runs `n_items` items in this process (so this process's registered
    plugins are seen): a `LocalExecutor` with one job, submitit's ``debug`` cluster; any other
    executor is taken to use other processes.
    """
    if isinstance(executor, LocalExecutor):
        return executor.jobs_for(n_items) == 1
    return isinstance(executor, SubmititExecutor) and executor.cluster == "debug"


def _in_process(fn: Callable[[T], Any], items: Sequence[T], threads: int) -> Iterator[Outcome[T]]:
    """One item after another in this process; a stop signal between two stops the rest."""
    with stop_on_signals() as stop:
        for index, item in enumerate(items):
            if stop.signum is not None:
                raise RunsInterrupted(stop.signum, 0, len(items) - index)
            yield call_reporting(fn, item, threads)


def _in_workers(
    fn: Callable[[T], Any], items: Sequence[T], jobs: int, threads: int, poll_s: float = 0.5
) -> Iterator[Outcome[T]]:
    """Items in `jobs` worker processes (`interp.sweep.pool`), stopped together on a signal."""
    from interp.sweep.pool import WorkerPool

    pool, waiting, stopped, signum = WorkerPool(threads), list(items), 0, None
    with stop_on_signals(forward=pool.forward) as stop:
        try:
            while pool.busy() or (waiting and signum is None):
                if signum is None and stop.signum is not None:
                    signum = stop.signum
                    pool.forward(signum)  # again: an item may have been given after the handler ran
                if signum is None:
                    while len(pool.workers) < min(jobs, pool.busy() + len(waiting)):
                        pool.start()  # at the start, or in place of one that died
                    for worker in pool.idle()[: len(waiting)]:
                        pool.give(worker, fn, waiting.pop(0))
                for outcome in pool.results(poll_s):
                    if outcome.interrupted is not None and stop.signum is not None:
                        stopped += 1  # stopped with the sweep: its checkpoint is saved
                    else:
                        yield outcome
                pool.check_starts()
            signum = stop.signum
        finally:
            pool.close()
    if signum is not None:
        raise RunsInterrupted(signum, stopped, len(waiting))


def _task_reporting(
    fn: Callable[[T], Any], item: T, threads: int | None, supervisor: int | None
) -> Outcome[T]:
    """Run one item in a submitit task: stop signals caught from the start, the sweep watched.

    In place of submitit's own handler, which would swallow a SIGTERM that comes before the
    run installs its own; `supervisor` is the sweep's pid for local tasks (None on Slurm).
    """
    with stop_on_signals():
        if supervisor is not None:
            watch_supervisor(supervisor)
        return call_reporting(fn, item, threads, in_worker=True)


@contextlib.contextmanager
def _signals_blocked(signums: Sequence[int]) -> Iterator[None]:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


_SUBMITIT_CLUSTERS = ("slurm", "local", "debug")


def _import_submitit() -> Any:
    try:
        import submitit
    except ImportError as err:
        from interp.errors import ConfigError

        raise ConfigError(
            "SubmititExecutor needs the submitit package, which is not installed",
            hint="pip install 'interp[cluster]'",
        ) from err
    return submitit


def _slurm_live_ids(job_ids: Sequence[str]) -> set[str] | None:
    """Job ids (``123_4`` for array tasks) that Slurm still lists as pending/running.

    None when squeue cannot be asked (then nothing may be concluded from absence).
    """
    import subprocess

    mains = sorted({job_id.split("_")[0] for job_id in job_ids})
    try:
        listed = subprocess.run(
            ["squeue", "--noheader", "--array", "--format=%i", "--jobs", ",".join(mains)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        # squeue exits 1 with "Invalid job id specified" once every listed job has left its
        # memory (MinJobAge): all of them are gone, not unknown.
        return set() if "Invalid job id" in listed.stderr else None
    return {line.strip() for line in listed.stdout.splitlines() if line.strip()}


@dataclass(frozen=True)
class SubmititExecutor:
    """Run items as one Slurm job array through submitit (needs the ``cluster`` extra).

    Each item becomes one array task running ``fn(item)``; an exception inside ``fn`` and a
    failure of the task itself (killed, timed out, out of memory, node failure) both come
    back as an `Outcome` with ``error`` set, never as an exception from `map`. Closing the
    iterator early (``break``, Ctrl-C) cancels the tasks not finished yet.

    Attributes:
        folder: Where submitit writes the pickled calls, results and logs (``%j`` allowed);
            must be on a file system the compute nodes share with this machine.
        cluster: submitit's executor: ``"slurm"``, ``"local"`` (subprocesses on this
            machine, at most ``array_parallelism`` at once) or ``"debug"`` (in this process,
            one after another).
        partition: Slurm partition (None: the cluster's default).
        timeout_min: Time limit per task, in minutes.
        cpus_per_task: CPUs Slurm reserves per task.
        mem_gb: Memory Slurm reserves per task, in GB.
        array_parallelism: Tasks of the array running at once.
        threads: torch threads per task (default: ``cpus_per_task``).
        poll_s: Longest wait between two checks for finished tasks.
        slurm_extra: Further submitit Slurm parameters (``{"account": "x", "qos": "y"}``,
            without the ``slurm_`` prefix), for clusters that need them.
    """

    folder: str | os.PathLike[str]
    cluster: str = "slurm"
    partition: str | None = None
    timeout_min: int = 240
    cpus_per_task: int = 2
    mem_gb: float = 4
    array_parallelism: int = 64
    threads: int | None = None
    poll_s: float = 10.0
    slurm_extra: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        from interp.errors import ConfigError

        if self.cluster not in _SUBMITIT_CLUSTERS:
            raise ConfigError(
                f"unknown submitit cluster {self.cluster!r}", hint=f"one of {', '.join(_SUBMITIT_CLUSTERS)}"
            )
        for name in ("timeout_min", "cpus_per_task", "array_parallelism"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.mem_gb <= 0 or self.poll_s <= 0:
            raise ConfigError(f"mem_gb and poll_s must be positive, got {self.mem_gb} and {self.poll_s}")

    def _executor(self) -> Any:
        submitit = _import_submitit()
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        params: dict[str, Any] = {
            "timeout_min": self.timeout_min,
            "cpus_per_task": self.cpus_per_task,
            "mem_gb": self.mem_gb,
            "slurm_array_parallelism": self.array_parallelism,
        }
        if self.partition is not None:
            params["slurm_partition"] = self.partition
        params.update({f"slurm_{key}": value for key, value in (self.slurm_extra or {}).items()})
        executor.update_parameters(**params)
        return executor

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[Outcome[T]]:
        """Submit every item as one task of a job array; yield outcomes as tasks finish.

        On a stop signal no further task is submitted; local tasks are sent SIGTERM (again
        every few seconds, since submitit's own handler swallows one that comes before the
        run starts) and waited for, Slurm tasks are cancelled (Slurm's SIGTERM, then SIGKILL
        after its KillWait).

        Raises:
            RunsInterrupted: After a stop signal, once every running local task has stopped.
        """
        items = list(items)
        if not items:
            return
        executor = self._executor()
        threads = self.threads or self.cpus_per_task
        # Slurm takes the whole sweep as one array and throttles it itself (%parallelism);
        # submitit's local executor has no throttle, so submit there as slots free up.
        batch = len(items) if self.cluster == "slurm" else self.array_parallelism
        # Local tasks watch this process, so that none trains on if it dies without a signal.
        supervisor = os.getpid() if self.cluster == "local" else None
        waiting = list(items)
        running: dict[Any, T] = {}
        gone_since: dict[Any, float] = {}  # job -> when squeue first stopped listing it
        wait, stopped, signum, forwarded = min(0.25, self.poll_s), 0, None, 0.0
        forward = partial(self._stop_tasks, running)
        with stop_on_signals(forward=forward if self.cluster == "local" else None) as stop:
            try:
                while running or (waiting and signum is None):
                    signum = stop.signum
                    if signum is not None and self.cluster == "slurm":
                        break  # cancelled below
                    if signum is not None and time.monotonic() - forwarded > 2:
                        forward(signum)
                        forwarded = time.monotonic()
                    if signum is None and waiting and len(running) < batch:
                        chunk = waiting[: batch - len(running)]
                        del waiting[: len(chunk)]
                        running.update(self._submit(executor, fn, chunk, threads, supervisor))
                    finished = self._finished(running, gone_since)
                    for outcome in finished:
                        if outcome.interrupted is not None and stop.signum is not None:
                            stopped += 1  # stopped with the sweep: its checkpoint is saved
                        else:
                            yield outcome
                    if finished:
                        wait = min(0.25, self.poll_s)
                    elif running:
                        time.sleep(wait if signum is None else min(wait, 0.5))
                        wait = min(wait * 2, self.poll_s)
                signum = stop.signum
            finally:
                self._end(running)
        if signum is not None:
            raise RunsInterrupted(signum, stopped, len(waiting))

    def _submit(
        self, executor: Any, fn: Callable[[T], Any], chunk: list[T], threads: int, supervisor: int | None
    ) -> dict[Any, T]:
        """Submit `chunk` as one job array; return its jobs and their items."""
        n = len(chunk)
        with self._terminal_signals_blocked():
            jobs = executor.map_array(_task_reporting, [fn] * n, chunk, [threads] * n, [supervisor] * n)
        return dict(zip(jobs, chunk))

    def _finished(self, running: dict[Any, T], gone_since: dict[Any, float]) -> list[Outcome[T]]:
        """The outcomes of the tasks that finished (or that Slurm lost), taken out of `running`."""
        outcomes = [self._outcome(job, running.pop(job)) for job in [j for j in running if j.done()]]
        if self.cluster == "slurm" and running:
            outcomes += [
                self._lost(job, running.pop(job)) for job in self._vanished(list(running), gone_since)
            ]
        return outcomes

    def _terminal_signals_blocked(self) -> Any:
        """Block SIGINT and SIGHUP while submitit starts local tasks, which inherit the mask.

        A terminal's Ctrl-C or hang-up reaches its whole process group; submitit's local
        controller would answer it by killing its task one second later, checkpoint or not.
        Blocked there, the signal reaches only this process, which stops the tasks cleanly
        (SIGTERM through their controller). Here it stays pending until unblocked: not lost.
        """
        blockable = [s for s in STOP_SIGNALS if s != signal.SIGTERM]
        if self.cluster != "local" or not hasattr(signal, "pthread_sigmask") or not blockable:
            return contextlib.nullcontext()
        return _signals_blocked(blockable)

    @staticmethod
    def _stop_tasks(running: dict[Any, Any], signum: int) -> None:
        """SIGTERM to each running local task's controller, which passes it on to the task."""
        for job in list(running):
            process = getattr(job, "_process", None)
            if process is not None and process.returncode is None:
                try:
                    os.kill(process.pid, signal.SIGTERM)
                except OSError:
                    pass

    def _end(self, running: dict[Any, T], grace_s: float = 120.0) -> None:
        """Leave no task running: Slurm ones cancelled, local ones stopped and waited for."""
        if self.cluster != "local":
            for job in running:
                try:
                    job.cancel(check=False)
                except Exception:  # noqa: BLE001, S110 - best effort on the way out
                    pass
            return
        deadline = time.monotonic() + grace_s
        for job in running:
            process = getattr(job, "_process", None)
            if process is None:
                continue
            while process.poll() is None and time.monotonic() < deadline:
                self._stop_tasks({job: None}, signal.SIGTERM)
                try:
                    process.wait(2)
                except Exception:  # noqa: BLE001, S110 - TimeoutExpired: ask again
                    pass
            if process.poll() is None:
                process.kill()  # its task, orphaned, still watches this process and stops
                process.wait()

    @staticmethod
    def _vanished(jobs: list[Any], gone_since: dict[Any, float]) -> list[Any]:
        """Tasks Slurm no longer lists yet left no result: failed at the Slurm level.

        submitit learns of such failures from ``sacct`` only, which needs accounting
        (slurmdbd) and is polled rarely; ``squeue`` answers without it. A task counts as
        gone after being missing for 10 s, so that a result still being written is not lost.
        """
        import time

        live = _slurm_live_ids([job.job_id for job in jobs])
        if live is None:
            return []
        now = time.time()
        gone = []
        for job in jobs:
            if job.job_id in live:
                gone_since.pop(job, None)
            elif now - gone_since.setdefault(job, now) >= 10:
                gone.append(job)
        return gone

    @staticmethod
    def _lost(job: Any, item: T) -> Outcome[T]:
        """The outcome of a task that ended without writing a result.

        Not through ``job.result()``: that waits until submitit itself sees the task finish,
        which without Slurm accounting is never.
        """
        if job.paths.result_pickle.exists():  # written after all, just now
            return SubmititExecutor._outcome_of_result(job, item)
        log = (job.stderr() or "").strip()
        state = job.watcher.get_state(job.job_id, mode="cache")
        return Outcome(
            item,
            error=f"UncompletedJobError (job {job.job_id}): task ended without a result "
            f"(Slurm state: {state}); it was killed, timed out, ran out of memory or exited hard. "
            + (f"Error log {job.paths.stderr}:\n{log[-2000:]}" if log else f"See {job.paths.stdout}"),
        )

    def _outcome(self, job: Any, item: T) -> Outcome[T]:
        if self.cluster != "slurm":
            # submitit waits 15 s for a result file a shared file system may show late; on
            # this machine a finished task without one has died (os._exit, killed, OOM).
            job._results_timeout_s = 1
        return self._outcome_of_result(job, item)

    @staticmethod
    def _outcome_of_result(job: Any, item: T) -> Outcome[T]:
        try:
            reported = job.result()
        except Exception as err:  # noqa: BLE001 - the task died outside fn: report, go on
            return Outcome(item, error=f"{type(err).__name__} (job {job.job_id}): {err}")
        if not isinstance(reported, Outcome):  # pragma: no cover - only call_reporting runs
            return Outcome(item, reported)
        return Outcome(item, reported.value, reported.error, reported.busy, interrupted=reported.interrupted)
