"""A run folder: the config, metrics log, lock and completion marker of one training run.

```
runs/<name>/config.json     model + task + train config, format_version, versions, git sha, machine
runs/<name>/metrics.jsonl   one JSON object per evaluation (step + metrics)
runs/<name>/checkpoints/    see `interp.store.checkpoint`
runs/<name>/analyses/       results of analyses per checkpoint: analyses/NAME/step_000100/
runs/<name>/sessions.jsonl  one line per training session: start step, pid, host, threads, machine
runs/<name>/DONE            written last (JSON summary)
runs/<name>/compute.json    the run's CPU time so far (a measurement, not a result)
runs/<name>/.lock           flock held by the process writing the run
```

`config.json` also records the torch thread count the run started with (``threads``), outside
the part of the config that must match on resume: float reductions depend on it, so a bit-exact
resume holds only for the same count, and resuming with another one says so. For the same
reason it records the ``machine`` (`machine`: the CPU's model name and the instruction set
torch's CPU kernels use), and so does every session: another CPU rounds some float32 results
differently (the same models have differed by up to 0.05 in retention after fine-tuning
on two machines), so a result is reproduced bit for bit only on the machine that made it.

A run folder is idempotent: re-running the same config resumes it, a different config is an
error (it would mix two experiments in one folder). Two floats that agree to float32 precision
(`FLOAT32_RTOL`) are the same value: a config may hold a quantity measured in float32 (an
entropy grid laid around a trained model's loss), and another CPU's kernels round its last bit
otherwise, so a run carried to a new machine would be refused for a difference of one unit in
the last place. The stored config.json is kept; the run goes on with the value measured now.
Every JSON file carries a `format_version`; a file from a newer `interp` is refused rather than
misread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from interp.errors import CheckpointError, ConfigError, RunBusyError, note
from interp.store.atomic import append_jsonl, atomic_write_json, atomic_write_text
from interp.store.layout import CONFIG_FILE, FORMAT_VERSION, read_json
from interp.store.provenance import git_sha, machine, software_versions, thread_count

METRICS_FILE = "metrics.jsonl"
SESSIONS_FILE = "sessions.jsonl"
ANALYSES_DIR = "analyses"  # RUN/analyses/NAME/step_N: results (`interp.store.handle.RunHandle.result_folder`)
DONE_FILE = "DONE"
COMPUTE_FILE = "compute.json"
LOCK_FILE = ".lock"
# Keys that create_run adds; everything else in config.json is the user's config.
# "plugins" (the packages a run's task came from, `interp.plugins`) is recorded like the versions:
# a plugin upgraded between sessions does not stop a run from resuming.
RESERVED_KEYS = ("format_version", "versions", "git_sha", "threads", "machine", "plugins")
# Eight units in float32's last place (its epsilon is 2**-23): the same float32 measurement
# rounded by another CPU's kernels, not a setting anyone would choose.
FLOAT32_RTOL = 2.0**-20


def create_run(
    run_dir: str | os.PathLike[str],
    config: Mapping[str, Any],
    *,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Path:
    """Create a run folder with its config.json, or accept an existing one with the same config.

    Args:
        run_dir: The run folder (created with its parents if missing).
        config: JSON-ready run config, e.g. ``{"model": {...}, "task": {...}, "train": {...}}``.
            Reserved keys (`RESERVED_KEYS`: versions, git sha, threads, machine) in it are ignored, so a config
            read back with `read_config` can be passed again; a ``plugins`` record is written, never compared.
        migrate: See `check_same_config`.

    Returns:
        The run folder.

    Raises:
        ConfigError: If the folder already holds a run with a different config.
        TypeError: If `config` is not JSON-serialisable.
    """
    run_dir = Path(run_dir)
    user = _user_config(config)
    path = run_dir / CONFIG_FILE
    if path.exists():
        check_same_config(run_dir, user, migrate=migrate)
        return run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    full = {"format_version": FORMAT_VERSION, **user}
    full["versions"] = software_versions()
    full["git_sha"] = git_sha()
    full["threads"] = thread_count()
    full["machine"] = machine()
    if config.get("plugins"):
        full["plugins"] = json.loads(json.dumps(config["plugins"]))
    atomic_write_json(path, full)
    return run_dir


def check_same_config(
    run_dir: str | os.PathLike[str],
    config: Mapping[str, Any],
    *,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Refuse to write `config` into a run folder that holds a different run (no-op if it holds none).

    `migrate`, if given, turns the stored config (reserved keys left out) into the current form
    of its engine's config before the comparison, so a run written by an older `interp` resumes.

    Raises:
        ConfigError: Naming the first key whose value differs.
        CheckpointError: If the folder's config.json is damaged.
    """
    path = Path(run_dir) / CONFIG_FILE
    if not path.exists():
        return
    stored = _user_config(read_config(run_dir))
    if migrate is not None:
        stored = migrate(stored)
    difference = _first_difference(stored, _user_config(config))
    if difference is not None:
        key, old, new = difference
        raise ConfigError(
            f"{path} holds a different run: {key} is {old!r} there but {new!r} now",
            "choose a new --out folder, or delete the old run",
        )


def check_unlocked(run_dir: str | os.PathLike[str]) -> None:
    """Refuse a run folder that another process is writing now (what `run_lock` would refuse).

    Only a probe, for failing before expensive work: it takes and drops the lock at once, and
    creates nothing. Writers must still hold `run_lock`.

    Raises:
        CheckpointError: If another process holds the folder's lock.
    """
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _locked(Path(run_dir), fd) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _locked(run_dir: Path, fd: int) -> RunBusyError:
    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
    return RunBusyError(
        f"run folder {run_dir} is being written by another process (pid {holder})",
        "wait for it to finish, or choose another --out folder",
    )


def check_engine(
    run_dir: str | os.PathLike[str],
    engine: str,
    *,
    section: str,
    default: str,
    hints: Mapping[str, str],
    verb: str = "written",
) -> None:
    """Refuse to continue a run folder with another engine than the one its config records.

    Two engines of one computation (stacked seeds and separate runs, a batched walk and a loop
    over walkers) agree only up to rounding: their sums run in another order, so a run that
    changed engine half-way would resume bit-identically with neither. A folder without a
    config passes; one whose `section` records no ``engine`` (it was written before the field)
    reads as `default`, the engine every run then used.

    Args:
        run_dir: The run folder (it need not exist).
        engine: The engine about to continue it.
        section: The config.json section that records the engine (e.g. ``"train"``).
        default: The engine a section without the field ran.
        hints: Recorded engine -> how to resume with it (the error's hint).
        verb: How the engine made the folder, for the message (``"trained"``, ``"walked"``).

    Raises:
        ConfigError: Naming the folder, the engine it records and how to resume it.
    """
    if not (Path(run_dir) / CONFIG_FILE).exists():
        return
    recorded_section = read_config(run_dir).get(section)
    recorded = recorded_section.get("engine", default) if isinstance(recorded_section, Mapping) else default
    if recorded != engine:
        raise ConfigError(
            f"{run_dir} was {verb} by the {recorded} engine, not the {engine} one: the engines agree "
            "only up to rounding, so a run keeps its engine",
            hints.get(recorded, f"resume it with the {recorded} engine"),
        )


def read_config(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run's config.json (with format_version, versions and git_sha).

    Raises:
        CheckpointError: If it is missing or damaged.
        FormatVersionError: If a newer `interp` wrote it.
    """
    return read_json(Path(run_dir) / CONFIG_FILE, what="a run config written by create_run")


def _user_config(config: Mapping[str, Any]) -> dict[str, Any]:
    # A JSON round trip makes tuples lists, as they will be once read back from disk.
    plain = json.loads(json.dumps(dict(config)))
    return {k: v for k, v in plain.items() if k not in RESERVED_KEYS}


def _first_difference(old: Any, new: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The dotted key, old and new value of the first place where two JSON values differ.

    Floats within `FLOAT32_RTOL` of each other do not differ.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        for k in list(old) + [k for k in new if k not in old]:
            sub = f"{key}.{k}" if key else k
            if k not in old or k not in new:
                return sub, old.get(k, "<missing>"), new.get(k, "<missing>")
            found = _first_difference(old[k], new[k], sub)
            if found is not None:
                return found
        return None
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):  # a tuple is stored as a list
        same = len(old) == len(new) and all(_first_difference(a, b) is None for a, b in zip(old, new))
        return None if same else (key or "<config>", old, new)
    if isinstance(old, bool) != isinstance(new, bool):  # True == 1 in Python, but a flag is not a count
        return key or "<config>", old, new
    if isinstance(old, float) and isinstance(new, float) and math.isclose(old, new, rel_tol=FLOAT32_RTOL):
        return None
    # 1 == 1.0 is fine (JSON writers differ).
    if old != new:
        return key or "<config>", old, new
    return None


def append_metrics(run_dir: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one evaluation (``{"step": int, ...metrics}``) to metrics.jsonl, durably.

    Raises:
        ValueError: If `record` has no integer "step".
    """
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"a metrics record needs an integer 'step', got {step!r}")
    append_jsonl(Path(run_dir) / METRICS_FILE, dict(record))


def read_metrics(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read all complete records of metrics.jsonl (none if the file does not exist yet).

    A last line without its newline was cut short by a killed writer: it is skipped with a
    note (`interp.errors.Note`), and resuming the run rewrites the log without it.

    Raises:
        CheckpointError: If a complete line is not a JSON object (the file is damaged).
    """
    path = Path(run_dir) / METRICS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if lines[-1]:  # the element after the last newline is empty unless a write was cut short
        note(
            f"{path}: skipped its partial last line ({len(lines[-1])} bytes, a write cut short by a kill); "
            "resuming the run rewrites the log"
        )
    lines = lines[:-1]
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            message = f"{path} line {number} is not valid JSON ({e}); the file is damaged"
            raise CheckpointError(message) from None
        if not isinstance(record, dict):
            raise CheckpointError(f"{path} line {number} is not a JSON object; the file is damaged")
        records.append(record)
    return records


def truncate_metrics(run_dir: str | os.PathLike[str], step: int) -> None:
    """Keep only the records with ``record["step"] <= step`` (atomically).

    Called when resuming from the checkpoint of `step`, so that the evaluations the killed
    run logged after it are not logged twice and metrics.jsonl ends up identical to that of an
    uninterrupted run.
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    kept = [r for r in read_metrics(run_dir) if r.get("step", step + 1) <= step]
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))


def mark_done(run_dir: str | os.PathLike[str], summary: Mapping[str, Any]) -> None:
    """Write DONE with a JSON summary; call it last, after the final checkpoint.

    Raises:
        ValueError: If `summary` has a "format_version" key (it is reserved).
    """
    if "format_version" in summary:
        raise ValueError("'format_version' is reserved in a DONE summary")
    atomic_write_json(Path(run_dir) / DONE_FILE, {"format_version": FORMAT_VERSION, **summary})


def write_compute(run_dir: str | os.PathLike[str], cpu_seconds: float, how: str) -> None:
    """Write the run's measured CPU time so far (training does, at every checkpoint and at the end).

    Kept out of DONE and the checkpoints on purpose: they hold what the run computed, which a
    resumed run reproduces bit for bit; CPU time measures the machine that ran it.
    """
    atomic_write_json(Path(run_dir) / COMPUTE_FILE, {"cpu_seconds": round(cpu_seconds, 1), "how": how})


def read_compute(run_dir: str | os.PathLike[str]) -> float | None:
    """The CPU seconds recorded by `write_compute`; None if none is recorded."""
    path = Path(run_dir) / COMPUTE_FILE
    return float(json.loads(path.read_text())["cpu_seconds"]) if path.is_file() else None


def run_machines(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The distinct machines that trained the run, in order: from its session log, or in a
    compact record (which leaves the log out) from the ``machines`` its `compute.json` names;
    none if neither says.
    """
    named = [s["machine"] for s in read_sessions(run_dir) if s.get("machine")]
    if not named and (path := Path(run_dir) / COMPUTE_FILE).is_file():
        named = json.loads(path.read_text()).get("machines", [])
    return [m for i, m in enumerate(named) if m not in named[:i]]


def is_done(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run finished (DONE is written atomically, so its presence is enough)."""
    return (Path(run_dir) / DONE_FILE).is_file()


def read_done(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The summary given to `mark_done`.

    Raises:
        CheckpointError: If the run has not finished or DONE is damaged.
    """
    data = read_json(Path(run_dir) / DONE_FILE, what="a DONE file: has the run finished?")
    return {k: v for k, v in data.items() if k != "format_version"}


def append_session(run_dir: str | os.PathLike[str], start_step: int) -> None:
    """Record in sessions.jsonl that this process (pid, host, threads, `machine`) trains the run
    from `start_step`.
    """
    import datetime
    import socket

    record = {
        "start_step": start_step,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "threads": thread_count(),
        "machine": machine(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    append_jsonl(Path(run_dir) / SESSIONS_FILE, record)


def read_sessions(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The complete records of sessions.jsonl (none if the run never trained)."""
    path = Path(run_dir) / SESSIONS_FILE
    try:
        lines = path.read_bytes().split(b"\n")[:-1]
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def is_locked(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a live process holds the run folder's lock right now."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def run_lock(run_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold an exclusive lock on a run folder while writing it (created if missing).

    The lock is an `fcntl.flock` on ``run_dir/.lock``; the OS drops it when the holder dies,
    so a killed run never leaves a stale lock.

    Yields:
        The run folder.

    Raises:
        RunBusyError: If another process holds the lock.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _locked(run_dir, fd) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield run_dir
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
