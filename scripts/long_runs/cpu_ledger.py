"""Attribute the CPU time of sweep workers to the run each is training.

Usage: `python3 scripts/long_runs/cpu_ledger.py SWEEP_DIR` (runs until killed). For sweeps trained
from a checkout that does not record CPU time (study A's map), this samples every 30 s: for
each process holding a run folder's lock or metrics below SWEEP_DIR open, the growth of its
user + system CPU time since the last sample is added to that run (a worker seen for the first
time brings everything it used so far to its first run). The ledger, SWEEP_DIR/cpu_ledger.json,
maps run folders (relative to SWEEP_DIR) to CPU seconds and keeps its last readings under
``_last``, so a restart of this script counts nothing twice. Standard library only: it must
not disturb the runs it measures.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
OPEN_FILES = ("metrics.jsonl", ".lock", "LOCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_of(pid: int, root: Path) -> str | None:
    """The run folder (relative to `root`) whose lock or metrics the process holds open, if any."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.name in OPEN_FILES and root in target.parents:
            return str(target.parent.relative_to(root))
    return None


def sample(root: Path, ledger: dict[str, float], last: dict[int, float]) -> None:
    """Add every worker's CPU time since the last sample to the run it is training."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        pid = int(proc.name)
        try:
            run = run_of(pid, root)
            if run is None:
                continue
            now = cpu_seconds(pid)
        except (OSError, IndexError):
            continue
        ledger[run] = ledger.get(run, 0.0) + max(0.0, now - last.get(pid, 0.0))
        last[pid] = now


def main() -> None:
    """Sample forever, writing the ledger atomically after each sample."""
    root = Path(sys.argv[1]).resolve()
    path = root / "cpu_ledger.json"
    ledger = json.loads(path.read_text()) if path.exists() else {}
    last = {int(k): v for k, v in ledger.pop("_last", {}).items()}
    while True:
        sample(root, ledger, last)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**ledger, "_last": last}, indent=1, sort_keys=True))
        os.replace(tmp, path)
        time.sleep(30)


if __name__ == "__main__":
    main()
