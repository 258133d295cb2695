"""Checkpoint bytes: reproducible across processes (safetensors' own header order is not)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import safetensors
import safetensors.torch
import torch

from interp.store.formats import canonical_safetensors, first_nonfinite, model_bytes

# A state dict built deterministically in any process, with enough keys that a header written
# in hash order differs between processes.
_SCRIPT = """
import hashlib, torch
from interp.store.formats import model_bytes
g = torch.Generator().manual_seed(0)
state = {f"blocks.{i}.w_{c}": torch.randn(3, 2, generator=g) for i in range(6) for c in "qkvo"}
print(hashlib.sha256(model_bytes(state)).hexdigest())
"""


def test_two_processes_write_identical_model_bytes():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    digests = {
        subprocess.run(
            [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, check=True
        ).stdout
        for _ in range(3)
    }
    assert len(digests) == 1


def test_canonical_bytes_hold_the_same_tensors_and_load_with_safetensors(tmp_path):
    state = {"b": torch.arange(6.0).reshape(2, 3), "a": torch.tensor([1, 2], dtype=torch.int64)}
    raw = safetensors.torch.save(state, metadata={"z": "1", "a": "2", "m": "3"})
    canonical = canonical_safetensors(raw)
    assert canonical == canonical_safetensors(canonical)  # a fixed point
    size = int.from_bytes(canonical[:8], "little")
    assert size % 8 == 0 and canonical[8 + size :] == raw[8 + int.from_bytes(raw[:8], "little") :]
    loaded = safetensors.torch.load(canonical)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    (tmp_path / "m.safetensors").write_bytes(canonical)
    with safetensors.safe_open(tmp_path / "m.safetensors", "pt") as f:
        assert f.metadata() == {"z": "1", "a": "2", "m": "3"}
    assert hashlib.sha256(model_bytes(state)).digest() == hashlib.sha256(model_bytes(dict(state))).digest()


def test_first_nonfinite_names_the_tensor_and_the_kind():
    assert first_nonfinite({"a": torch.ones(2), "i": torch.arange(3)}) is None
    assert first_nonfinite({"a": torch.ones(2), "b": torch.tensor([1.0, float("nan")])}) == ("b", "nan")
    assert first_nonfinite({"c": torch.tensor([float("-inf")]), "b": torch.tensor(float("nan"))}) == (
        "c",
        "inf",
    )
