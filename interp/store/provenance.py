"""Where and with what a run computed: software versions, git commit, threads, processor.

Recorded in config.json by `interp.store.run_folder.create_run` and per session in
sessions.jsonl, so a result that differs between two runs can be traced to what differed (float
sums depend on the thread count and on the vector instruction set the CPU kernels use).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path


def software_versions() -> dict[str, str | None]:
    """The versions that a run's results depend on, for config.json."""
    import torch  # here, so that the rest of this module stays torch-free

    from interp import __version__

    try:
        # Read from the installed metadata: importing transformer_lens takes seconds.
        tl_version: str | None = importlib.metadata.version("transformer-lens")
    except importlib.metadata.PackageNotFoundError:
        tl_version = None
    return {
        "interp": __version__,
        "torch": torch.__version__,
        "transformer_lens": tl_version,
        "python": platform.python_version(),
    }


def thread_count() -> int:
    """The torch intra-op thread count of this process (float sums depend on it)."""
    import torch

    return torch.get_num_threads()


def machine() -> dict[str, str | None]:
    """The processor this process computes on, as far as float results depend on it.

    Returns:
        ``cpu``: the model name the kernel reports (``/proc/cpuinfo``; elsewhere
        `platform.processor`, or at least the architecture; None if nothing says);
        ``cpu_capability``: the vector instruction set torch's CPU kernels dispatch to (e.g.
        ``"AVX2"``, ``"AVX512"``): two machines with different ones
        sum in different orders.
    """
    import torch

    cpu = platform.processor() or platform.machine() or None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip() or cpu
                break
    return {"cpu": cpu, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def git_sha() -> str | None:
    """The commit of the `interp` source checkout, or None if it cannot be told (best effort)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if len(sha) == 40 else None
