"""Suite-wide fixtures.

`no_leaked_hooks` (autouse) fails any test that leaves a forward or backward hook registered
on a module: library code must scope hooks with `model.hooks(...)` / `run_with_hooks`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from importlib.metadata import version

import pytest
import torch
from torch import nn

# Entry-point plugins are off in the suite (so a plugin installed in the venv changes no test);
# the plugin tests turn them on for themselves. Set at import: subprocesses inherit it.
os.environ["INTERP_NO_PLUGINS"] = "1"

# tests/tl4 runs under TransformerLens 4.x (`make test-tl4`), tests/oracle's TransformerLens
# oracles under 3.x (`make test`): each venv collects the tests of its own TransformerLens.
_TL_MAJOR = int(version("transformer-lens").split(".")[0])
collect_ignore = ["tl4"] if _TL_MAJOR < 4 else ["oracle/test_transformer_lens_subjects.py"]
# torch.compile's kernels are cached in /tmp/torchinductor_$USER across processes; a kernel left
# half-written there by a killed run aborted the interpreter when loaded (CI's worker crash in
# test_compiled_fast_readout_matches_hooked_forward). The suite compiles into a cache of its own.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="interp-tests-inductor-")
atexit.register(shutil.rmtree, os.environ["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)

_REGISTER = (
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_backward_hook",
)


@pytest.fixture(autouse=True)
def no_leaked_hooks(monkeypatch: pytest.MonkeyPatch):
    """Record every module a hook is registered on during the test; fail if any keeps one."""
    touched: list[nn.Module] = []
    for name in _REGISTER:
        original = getattr(nn.Module, name)

        def recording(self, *args, _original=original, **kwargs):
            touched.append(self)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(nn.Module, name, recording)
    yield
    leaked = [
        type(m).__name__ + getattr(m, "name", "")
        for m in touched
        if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
    ]
    assert not leaked, f"test left hooks registered on: {sorted(set(leaked))}"


def _threads() -> int:
    """Torch threads per test process: 2, or the cores' share of one xdist worker (`make test`
    runs 2 workers on 2 cores: 2 threads each oversubscribed the cores, and CI's llc tests ran
    ~20x slower than on quiet ones).
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


THREADS = _threads()
# The same for the processes tests start (a CLI in a subprocess, a docs build executing a
# tutorial): they inherit it unless they set their own (`--threads`).
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))


@pytest.fixture(autouse=True)
def _deterministic_threads():
    # Tests compare floats at 1e-5; fix the thread count so reductions are reproducible.
    torch.set_num_threads(THREADS)
    yield


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test (`pytest.mark.usefixtures("one_torch_thread")` on a module of
    thousands of tiny steps, such as a WLMD walk: intra-op threads only add contention there).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
