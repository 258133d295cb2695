"""Checkpoints: exact round trips, and one clear error for each way a checkpoint can be bad."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from interp.errors import CheckpointError, FormatVersionError
from interp.store.checkpoint import (
    Checkpoint,
    drop_checkpoints,
    list_checkpoints,
    load_checkpoint,
    load_state_into,
    resolve_checkpoint,
    save_checkpoint,
)


def same(a: Any, b: Any) -> bool:
    """Exact equality: tensors bit for bit (NaN, -0.0) with dtype; containers with their types."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        )
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def raised(error: type[Exception], fn: Any, *args: Any, **kwargs: Any) -> str:
    """Call `fn` and return the message of the error it raises, which must be exactly `error`."""
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    return str(info.value)


def model_state(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(4, 3, generator=generator), "b": torch.randn(4, generator=generator)}


def save_steps(run_dir: Path, *steps: int) -> None:
    for step in steps:
        save_checkpoint(run_dir, step, model_state(step), {"step": step}, {"seed": step})


def trained_adamw() -> tuple[torch.nn.Module, torch.optim.AdamW]:
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.1)
    module(torch.randn(5, 3)).square().sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    return module, optimizer


def test_round_trip_is_exact(run_dir: Path) -> None:
    tied = torch.randn(5, 2)
    state = {
        "f32": torch.tensor([1.5, float("nan"), -0.0, float("inf"), 1e-45]),
        "bf16": torch.randn(3, 4).to(torch.bfloat16),
        "i64": torch.arange(-3, 9, dtype=torch.int64).reshape(3, 4),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(7.25),
        "transposed": torch.randn(3, 5).T,  # not contiguous
        "tied_a": tied,
        "tied_b": tied,  # shares memory, which safetensors alone refuses
    }
    module, optimizer = trained_adamw()
    train_state = {
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.Random(3).getstate(),
        "step": 7,
        "lr": 0.1,
        "history": [1, 2.5, "warmup", None, True],
    }
    meta = {"fingerprints": {"train": "ab12", "val": "cd34"}}
    folder = save_checkpoint(run_dir, 100, state, train_state, meta)
    assert folder == run_dir / "checkpoints" / "step_000100"
    loaded = load_checkpoint(folder, allow_nonfinite=True)  # the state holds NaN and inf on purpose
    assert same(loaded.state_dict, {k: v.contiguous() for k, v in state.items()})
    assert same(loaded.train_state, train_state)
    assert (loaded.step, loaded.meta, loaded.run_dir, loaded.path) == (100, meta, run_dir, folder)
    assert loaded.config["train"]["lr"] == 1e-3


def test_a_restored_optimizer_continues_bit_identically(run_dir: Path) -> None:
    module, optimizer = trained_adamw()
    save_checkpoint(run_dir, 1, module.state_dict(), {"optimizer": optimizer.state_dict()})
    loaded = load_checkpoint(run_dir)
    clone = torch.nn.Linear(3, 2)
    load_state_into(clone, loaded.state_dict, where=str(loaded.path))
    clone_optimizer = torch.optim.AdamW(clone.parameters(), lr=0.1)
    clone_optimizer.load_state_dict(loaded.train_state["optimizer"])
    x = torch.randn(5, 3)
    for m, opt in ((module, optimizer), (clone, clone_optimizer)):
        m(x).square().sum().backward()
        opt.step()
    assert same(dict(module.state_dict()), dict(clone.state_dict()))


def test_loader_accepts_a_run_folder_or_a_checkpoint_folder(run_dir: Path) -> None:
    save_steps(run_dir, 10, 20)
    assert (run_dir / "checkpoints" / "LATEST").read_text().strip() == "step_000020"
    assert resolve_checkpoint(run_dir) == run_dir / "checkpoints" / "step_000020"
    assert load_checkpoint(str(run_dir)).step == 20
    earlier = load_checkpoint(run_dir / "checkpoints" / "step_000010")
    assert earlier.step == 10 and same(earlier.state_dict, model_state(10))
    assert "tensor(" not in repr(earlier) and "state_dict=" not in repr(earlier)  # short repr


def test_list_checkpoints_skips_temporary_folders(run_dir: Path) -> None:
    assert list_checkpoints(run_dir) == []
    save_steps(run_dir, 30, 1_000_000, 5)
    (run_dir / "checkpoints" / ".tmp-step_000040-99999999").mkdir()
    assert list_checkpoints(run_dir) == [5, 30, 1_000_000]
    assert "does not exist" in raised(CheckpointError, list_checkpoints, run_dir / "nope")


def test_saving_a_step_again_replaces_it(run_dir: Path) -> None:
    save_steps(run_dir, 1, 2)
    save_checkpoint(run_dir, 2, model_state(99))
    loaded = load_checkpoint(run_dir)
    assert loaded.step == 2 and same(loaded.state_dict, model_state(99)) and loaded.train_state is None
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "LATEST",
        "step_000001",
        "step_000002",
    ]


def test_dropping_checkpoints_points_latest_at_the_newest_left(run_dir: Path) -> None:
    save_steps(run_dir, 1, 2, 3)
    drop_checkpoints(run_dir, [3])
    assert list_checkpoints(run_dir) == [1, 2] and load_checkpoint(run_dir).step == 2
    drop_checkpoints(run_dir, [1])  # LATEST already names the newest left
    assert list_checkpoints(run_dir) == [2] and load_checkpoint(run_dir).step == 2
    drop_checkpoints(run_dir, [2, 7])  # a step that is not there is no error
    assert list_checkpoints(run_dir) == [] and not (run_dir / "checkpoints" / "LATEST").exists()
    assert "no checkpoint yet" in raised(CheckpointError, load_checkpoint, run_dir)


def test_a_drop_killed_half_way_leaves_latest_naming_a_checkpoint_kept(run_dir: Path, monkeypatch) -> None:
    """LATEST moves before any folder goes: a kill while deleting leaves it loadable."""
    import interp.store.checkpoint as checkpoint

    save_steps(run_dir, 1, 2, 3)

    def killed(path, ignore_errors=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        drop_checkpoints(run_dir, [2, 3])
    monkeypatch.undo()
    assert list_checkpoints(run_dir) == [1, 2, 3] and load_checkpoint(run_dir).step == 1


def test_train_state_that_could_not_be_loaded_safely_is_refused_at_save(run_dir: Path) -> None:
    message = raised(TypeError, save_checkpoint, run_dir, 1, model_state(), {"np_rng": np.random.get_state()})
    assert "weights_only" in message and "numpy" in message
    assert not (run_dir / "checkpoints").exists()  # nothing was written
    raised(TypeError, save_checkpoint, run_dir, 1, model_state(), None, {"bad": object()})
    raised(ValueError, save_checkpoint, run_dir, -1, model_state())
    message = raised(CheckpointError, save_checkpoint, run_dir.parent, 1, model_state())
    assert "config.json" in message and "create_run" in message


def test_load_without_train_state_skips_it(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    (run_dir / "checkpoints" / "step_000001" / "train_state.pt").write_bytes(b"damaged")
    loaded = load_checkpoint(run_dir, load_train_state=False)
    assert loaded.train_state is None and same(loaded.state_dict, model_state(1))


# --- damaged and missing files -------------------------------------------------------------


@pytest.mark.parametrize("file", ["model.safetensors", "train_state.pt"])
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_file_is_named_and_an_earlier_checkpoint_suggested(
    run_dir: Path, file: str, damage: str
) -> None:
    save_steps(run_dir, 1, 2)
    path = run_dir / "checkpoints" / "step_000002" / file
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    message = raised(CheckpointError, load_checkpoint, run_dir)
    assert f"{path} is damaged" in message and "killed write or a disk error" in message
    assert str(run_dir / "checkpoints" / "step_000001") in message


def test_a_missing_checkpoint_folder(run_dir: Path) -> None:
    missing = run_dir / "checkpoints" / "step_000099"
    message = raised(CheckpointError, load_checkpoint, missing)
    assert f"{missing} does not exist" in message and "step_000100" in message


def test_a_run_without_checkpoints(run_dir: Path) -> None:
    message = raised(CheckpointError, load_checkpoint, run_dir)
    assert "has no checkpoint yet" in message and "LATEST" in message


def test_a_folder_that_is_neither(tmp_path: Path) -> None:
    message = raised(CheckpointError, load_checkpoint, tmp_path)
    assert "neither a checkpoint folder nor a run folder" in message
    (tmp_path / "file").write_text("x")
    assert "is a file" in raised(CheckpointError, load_checkpoint, tmp_path / "file")


def test_latest_naming_a_missing_or_bad_folder(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    latest = run_dir / "checkpoints" / "LATEST"
    latest.write_text("step_000005\n")
    message = raised(CheckpointError, load_checkpoint, run_dir)
    assert "LATEST names step_000005, which does not exist" in message and "step_000001" in message
    latest.write_text("garbage")
    assert "damaged" in raised(CheckpointError, load_checkpoint, run_dir)


def test_a_missing_manifest(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    (run_dir / "checkpoints" / "step_000001" / "manifest.json").unlink()
    message = raised(CheckpointError, load_checkpoint, run_dir)
    assert "has no manifest.json" in message and "step_000001" in message
    assert list_checkpoints(run_dir) == []  # incomplete folders are not listed


def test_a_missing_model_file(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    (run_dir / "checkpoints" / "step_000001" / "model.safetensors").unlink()
    assert "is missing model.safetensors" in raised(CheckpointError, load_checkpoint, run_dir)


def rewrite_json(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("file", ["manifest.json", "config.json"])
def test_a_newer_format_version(run_dir: Path, file: str) -> None:
    save_steps(run_dir, 1)
    path = run_dir / file if file == "config.json" else run_dir / "checkpoints" / "step_000001" / file
    rewrite_json(path, format_version=2)
    message = raised(FormatVersionError, load_checkpoint, run_dir)
    assert str(path) in message and "format_version 2" in message and "upgrade interp" in message


@pytest.mark.parametrize("file", ["manifest.json", "config.json"])
def test_invalid_json(run_dir: Path, file: str) -> None:
    save_steps(run_dir, 1)
    path = run_dir / file if file == "config.json" else run_dir / "checkpoints" / "step_000001" / file
    path.write_text(path.read_text()[:-5])
    assert f"{path} is not valid JSON" in raised(CheckpointError, load_checkpoint, run_dir)


def test_a_manifest_naming_other_files_is_refused(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    path = run_dir / "checkpoints" / "step_000001" / "manifest.json"
    rewrite_json(path, files={"model.safetensors": "0" * 64, "../../config.json": "0" * 64})
    assert "malformed" in raised(CheckpointError, load_checkpoint, run_dir)


# --- untrusted content ---------------------------------------------------------------------


class CreatesMarker:
    """Unpickling this would create a file: the kind of payload weights_only must refuse."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def forge(folder: Path, name: str, data: bytes) -> None:
    """Replace a file of a checkpoint and make its manifest agree, as an attacker would."""
    (folder / name).write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256(data).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("container", ["torch.save", "raw pickle"])
def test_a_malicious_train_state_is_refused_and_not_executed(
    run_dir: Path, tmp_path: Path, container: str
) -> None:
    marker = tmp_path / "pwned"
    payload = {"optimizer": CreatesMarker(marker)}
    if container == "torch.save":
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        data = buffer.getvalue()
    else:
        data = pickle.dumps(payload)
    save_steps(run_dir, 1)
    forge(run_dir / "checkpoints" / "step_000001", "train_state.pt", data)
    message = raised(CheckpointError, load_checkpoint, run_dir)
    assert "train_state.pt contains objects that are not allowed" in message and "not executed" in message
    assert not marker.exists()


def test_a_forged_model_file_that_is_not_safetensors(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    forge(run_dir / "checkpoints" / "step_000001", "model.safetensors", b"\xff" * 64)
    assert "not a readable safetensors file" in raised(CheckpointError, load_checkpoint, run_dir)


# --- weights that do not fit the model -----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s.pop("bias"), "has no weight 'bias' that the model needs"),
        (lambda s: s.update(extra=torch.zeros(1)), "has weight 'extra' that the model does not"),
        (
            lambda s: s.update(weight=torch.zeros(3, 3)),
            "has weight 'weight' of shape [3, 3], but the model expects [2, 3]",
        ),
    ],
    ids=["missing", "unexpected", "shape"],
)
def test_load_state_into_names_the_first_mismatch(change: Any, expected: str) -> None:
    module = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    state = {k: torch.ones_like(v) for k, v in module.state_dict().items()}
    change(state)
    message = raised(CheckpointError, load_state_into, module, state, where="runs/x/checkpoints/step_000001")
    assert message.startswith("runs/x/checkpoints/step_000001") and expected in message
    assert "config does not match the weights" in message
    assert same(dict(module.state_dict()), before)  # nothing was loaded


def test_checkpoint_is_frozen(run_dir: Path) -> None:
    save_steps(run_dir, 1)
    loaded = load_checkpoint(run_dir)
    assert isinstance(loaded, Checkpoint)
    with pytest.raises(AttributeError):
        loaded.step = 2  # type: ignore[misc]
