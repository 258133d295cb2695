"""Crash-safe file writes: a reader sees the old file or the new one, never half of one.

A run can be killed at any moment (Ctrl-C, a cluster's time limit, a full disk). Every file
that `interp` replaces is written to a temporary name in the same folder, flushed and
fsynced, then renamed over the target with `os.replace` (atomic on POSIX), and the folder is
fsynced so the rename itself survives a power cut. Temporary names start with a dot and carry
the writer's pid, so readers skip them and a later writer can tell a dead writer's leftovers.

Caches of derived results (an analysis at every checkpoint of a series) may skip the fsyncs
(`durable=False`): still atomic for a killed process, but a power cut may lose the new file or
leave it empty, so such a cache must check what it reads (`analyses.base.Result` stores its
tensors' digest) and recompute. On this project's machines an fsync costs about 4 ms, and a
100-checkpoint series writes hundreds of files.

Append-only logs (`metrics.jsonl`) are written a whole line at a time and fsynced; a line
without its final newline is the trace of a killed writer and is dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (renames, new files) to disk.

    Args:
        folder: The folder whose listing must survive a crash.
    """
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it
    os.umask(mask)
    return mask


def temp_prefix(path: Path) -> str:
    """The prefix of the temporary names used while writing `path` (dot, name, pid)."""
    return f".{path.name}.{os.getpid()}."


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, durable: bool = True) -> None:
    """Replace the file at `path` with `data`, atomically and (by default) durably.

    Args:
        path: The target file; its folder must exist.
        data: The complete new content.
        durable: Fsync the file and its folder, so the new content survives a power cut. False
            keeps the write atomic for a killed process only (a cache that verifies its reads).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp creates 0600; give the file the permissions a plain open() would have.
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if (
            err.filename is None and err.errno is not None
        ):  # a failed write names no file; a full disk should say which
            err.filename = str(path)
        raise
    except BaseException:
        # Only a failed write gets here; a killed process leaves `tmp` for later cleanup.
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, durable: bool = True) -> None:
    """Replace the file at `path` with `text` (UTF-8), atomically and durably (`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def dumps_json(obj: Any) -> str:
    """Serialise `obj` the way every `interp` JSON file is written (indented, key order kept)."""
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | os.PathLike[str], obj: Any, *, durable: bool = True) -> None:
    """Replace the file at `path` with `obj` as indented JSON, atomically and durably (`atomic_write_bytes`).

    Raises:
        TypeError: If `obj` is not JSON-serialisable (nothing is written then).
    """
    atomic_write_text(path, dumps_json(obj), durable=durable)


def append_jsonl(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Append `record` as one JSON line to `path` (created if missing) and fsync it.

    A partial last line left by a killed writer is cut off first, so it can never merge with
    the new record into one unreadable line. A write that fails (a full disk) is cut off too,
    so the file ends with its last complete record.

    Raises:
        TypeError: If `record` is not JSON-serialisable (nothing is written then).
        OSError: If the line cannot be written (e.g. ENOSPC, naming `path`).
    """
    line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
    # Unbuffered: a failed write must leave no buffered bytes behind to be flushed later.
    with open(path, "ab+", buffering=0) as f:
        _drop_partial_line(f)
        size = f.seek(0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(f.fileno(), view) :]
            os.fsync(f.fileno())
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(f.fileno(), size)
            if err.filename is None and err.errno is not None:
                err.filename = str(path)
            raise


def _drop_partial_line(f: Any) -> None:
    """Truncate an open binary file after its last newline if it does not end with one."""
    size = f.seek(0, os.SEEK_END)
    if size == 0:
        return
    f.seek(size - 1)
    if f.read(1) == b"\n":
        return
    # Scan back in blocks: partial lines are short, but stay linear even if one is not.
    end, block = size, 4096
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        chunk = f.read(end - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            f.truncate(start + cut + 1)
            return
        end = start
    f.truncate(0)
