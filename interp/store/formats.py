"""The bytes of a checkpoint's files: what may be stored, and reading it back without running code.

* Weights: safetensors (tensors only, by construction), with the state dict's key order kept in
  the header metadata so a loaded state dict iterates as it was saved. The header is rewritten
  in one canonical form (sorted keys, no spaces): safetensors writes its metadata in an order
  that varies from process to process, and two identical runs must write identical bytes (their
  manifests' sha256 then agree).
* Training state (optimizer, RNG states): a torch file that must load with
  ``torch.load(weights_only=True)``. Saving checks that now, so a run never writes a state it could
  not resume; loading never unpickles anything else (a forged file is refused, not executed).

`interp.store.checkpoint` owns the folders, manifests and checksums around these bytes.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from safetensors import SafetensorError
from torch import Tensor

from interp.errors import CheckpointError

_ORDER_KEY = "interp_key_order"


def model_bytes(state_dict: Mapping[str, Tensor]) -> bytes:
    """The safetensors bytes of a state dict, its key order kept."""
    tensors = {}
    for key, value in state_dict.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            got = f"{key!r}: {type(value).__name__}"
            raise TypeError(f"a state dict maps names to tensors, got {got}")
        # Private contiguous copies: safetensors refuses tensors that share memory (tied weights).
        tensors[key] = value.detach().cpu().clone(memory_format=torch.contiguous_format)
    # safetensors sorts its header; the order is kept so a loaded state dict iterates as saved.
    metadata = {"format": "pt", _ORDER_KEY: json.dumps(list(tensors))}
    return canonical_safetensors(safetensors.torch.save(tensors, metadata=metadata))


def canonical_safetensors(data: bytes) -> bytes:
    """The same safetensors file with its JSON header in one canonical form.

    The header maps names to dtype, shape and byte offsets into the data that follows it, so it
    can be re-serialised (sorted keys, compact, space-padded to 8 bytes as the format asks)
    without touching the data: the tensors are the same, and so are the bytes of any two
    processes that save them.
    """
    size = int.from_bytes(data[:8], "little")
    header = json.dumps(json.loads(data[8 : 8 + size]), sort_keys=True, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + size :]


def first_nonfinite(state_dict: Mapping[str, Tensor]) -> tuple[str, str] | None:
    """The first floating tensor holding NaN or inf, as ``(name, "nan" | "inf")``; None if all finite."""
    for name, value in state_dict.items():
        if value.is_floating_point() or value.is_complex():
            finite = torch.isfinite(value)
            if not bool(finite.all()):
                return name, "nan" if bool(torch.isnan(value).any()) else "inf"
    return None


def model_from_bytes(path: Path, data: bytes) -> dict[str, Tensor]:
    """The state dict in safetensors `data` (read from `path`, named in errors), in stored order."""
    try:
        tensors = safetensors.torch.load(data)
        header_size = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_size]).get("__metadata__") or {}
    except (SafetensorError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable safetensors file ({e})") from None
    try:
        order = json.loads(metadata.get(_ORDER_KEY, "null"))
    except ValueError:
        order = None  # a file from elsewhere: any order will do
    if isinstance(order, list) and sorted(order) == sorted(tensors):
        return {key: tensors[key] for key in order}
    return tensors


def train_state_bytes(train_state: dict[str, Any]) -> bytes:
    """The bytes of a train state (optimizer, RNG) as a torch file that loads with weights_only."""
    buffer = io.BytesIO()
    torch.save(train_state, buffer)
    data = buffer.getvalue()
    # Refuse now what the loader would refuse later: a run must never save an unresumable state.
    try:
        torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        reason = re.search(r"Unsupported global: [^\n]*", str(e))
        raise TypeError(
            "train_state holds a value that torch.load(weights_only=True) refuses "
            f"({reason.group(0) if reason else 'not a tensor or plain Python value'}); "
            "convert it to tensors or plain Python values"
        ) from None
    return data


def train_state_from_bytes(path: Path, data: bytes) -> dict[str, Any]:
    """The train state in `data` (read from `path`), loaded with ``weights_only=True``."""
    try:
        state = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path} contains objects that are not allowed in a checkpoint (only tensors and "
            "plain Python values are); it was not executed",
            "do not load checkpoints from untrusted sources",
        ) from None
    except Exception as e:  # any other parse failure of verified bytes: a forged or foreign file
        raise CheckpointError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, expected a dict")
    return state
