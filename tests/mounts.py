"""Real small filesystems for the fault tests: a tmpfs of a few MB, remounted bigger or read-only.

Mounting needs root. On a machine without it the tests that need a mount skip with the reason;
`.ci/run` (which runs as root) sets ``INTERP_REQUIRE_ROOT_TESTS=1``, and then such a test fails
instead of skipping, so CI can never pass with them silently left out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REQUIRE_ENV = "INTERP_REQUIRE_ROOT_TESTS"


def require_root(what: str) -> None:
    """Skip (or, under `REQUIRE_ENV`, fail) unless this process is root and can mount a tmpfs."""
    reason = None
    if os.geteuid() != 0:
        reason = f"{what} needs root to mount a small filesystem (running as uid {os.geteuid()})"
    if reason is None:
        probe = Path(f"/tmp/interp-mount-probe-{os.getpid()}")
        probe.mkdir(exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
        )
        if done.returncode == 0:
            subprocess.run(["umount", str(probe)], check=True)
        else:
            reason = f"{what} needs to mount a tmpfs, which failed: {done.stderr.decode().strip()}"
        probe.rmdir()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{reason}, but {REQUIRE_ENV}=1 requires it to run")
        pytest.skip(reason)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` (e.g. ``"2m"``, ``"600k"``) at `path` (created); unmount at the end."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, options: str) -> None:
    """Remount the tmpfs at `path` with `options` (``"size=64m"``, ``"ro"``, ``"rw"``)."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)
