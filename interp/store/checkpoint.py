"""Checkpoints: self-describing, verified snapshots of a run's weights and training state.

::

    runs/<name>/checkpoints/step_000100/model.safetensors   the module's state dict
                                        train_state.pt      optimizer + RNG states (weights_only)
                                        manifest.json       format_version, step, sha256 per file, meta
    runs/<name>/checkpoints/LATEST                          name of the newest checkpoint folder

A checkpoint is written into a hidden temporary folder, fsynced, and renamed into place in one
step; LATEST is replaced atomically after that. So a run killed at any moment leaves the
previous checkpoint and LATEST loadable, and a checkpoint folder is either complete or absent.
Loading checks every file against the manifest's sha256 before deserialising anything, and
reads train_state.pt only with ``torch.load(weights_only=True)``: a checkpoint is data, never
code. The run folder around the checkpoints (config, metrics, DONE, lock) is `interp.store.run_folder`; the
bytes of the files themselves (safetensors, weights-only torch files) are `interp.store.formats`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from interp.errors import CheckpointError
from interp.store.atomic import atomic_write_text, dumps_json, fsync_dir
from interp.store.formats import (
    first_nonfinite,
    model_bytes,
    model_from_bytes,
    train_state_bytes,
    train_state_from_bytes,
)
from interp.store.layout import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    FORMAT_VERSION,
    LATEST_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    STEP_DIR,
    TRAIN_STATE_FILE,
    checkpoint_name,
    complete_steps,
    list_checkpoints,
    others_hint,
    read_latest,
    read_manifest,
    resolve_checkpoint,
    run_of,
)
from interp.store.run_folder import read_config

# Leftovers of a killed save: its temporary folder, a displaced old folder, LATEST's temp file.
_STALE_DIR = re.compile(r"^\.(tmp|old)-(step_\d{6,})-(\d+)$")
_STALE_LATEST = re.compile(r"^\.LATEST\.(\d+)\..*\.tmp$")
_MISMATCH = "the model config does not match the weights; build the model from the run's config.json"


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        path: The checkpoint folder (``.../checkpoints/step_000100``).
        run_dir: The run folder holding it.
        step: The training step it was saved at.
        config: The run's config.json (with format_version, versions and git_sha).
        state_dict: The module's tensors, on the CPU, with the shapes and dtypes they were saved with.
        train_state: Optimizer and RNG states, or None if not saved or not requested.
        meta: Extra JSON data saved with it (e.g. split fingerprints).
    """

    path: Path
    run_dir: Path
    step: int
    config: dict[str, Any]
    state_dict: dict[str, Tensor] = field(repr=False)
    train_state: dict[str, Any] | None = field(repr=False)
    meta: dict[str, Any]


def save_checkpoint(
    run_dir: str | os.PathLike[str],
    step: int,
    state_dict: Mapping[str, Tensor],
    train_state: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of `step` atomically and point LATEST at it.

    Args:
        run_dir: A run folder made by `create_run`.
        step: The training step, >= 0. An existing checkpoint of that step is replaced.
        state_dict: Tensors of any shape, dtype and device (saved as contiguous CPU copies).
        train_state: Optimizer state dicts, RNG states and plain Python values; only what
            ``torch.load(weights_only=True)`` accepts (tensors, numbers, strings, lists,
            tuples, dicts), so that loading never runs code.
        meta: JSON-ready extra data, e.g. split fingerprints.

    Returns:
        The checkpoint folder.

    Raises:
        CheckpointError: If `run_dir` has no config.json.
        TypeError: If `train_state` or `meta` holds a value that cannot be stored safely.
        ValueError: If `step` is not a non-negative integer.
    """
    run_dir = Path(run_dir)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an integer >= 0, got {step!r}")
    if not (run_dir / CONFIG_FILE).is_file():
        hint = "call create_run before saving checkpoints"
        raise CheckpointError(f"{run_dir} has no {CONFIG_FILE}", hint)
    # Serialise everything before touching the disk: a bad value then writes nothing at all.
    files = {MODEL_FILE: model_bytes(state_dict)}
    if train_state is not None:
        files[TRAIN_STATE_FILE] = train_state_bytes(train_state)
    manifest = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
        "meta": dict(meta or {}),
    }
    files[MANIFEST_FILE] = dumps_json(manifest).encode("utf-8")  # last: it marks completeness
    ckpt_dir = run_dir / CHECKPOINTS_DIR
    ckpt_dir.mkdir(exist_ok=True)
    _clean_stale(ckpt_dir)
    final = ckpt_dir / checkpoint_name(step)
    tmp = ckpt_dir / f".tmp-{final.name}-{os.getpid()}"
    tmp.mkdir()
    try:
        for name, data in files.items():
            _write_synced(tmp / name, data)
        fsync_dir(tmp)
        _move_into_place(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    atomic_write_text(ckpt_dir / LATEST_FILE, final.name + "\n")
    return final


def drop_checkpoints(run_dir: str | os.PathLike[str], steps: Iterable[int]) -> None:
    """Delete the checkpoints of `steps` and point LATEST at the newest one left (none: no LATEST).

    LATEST moves first, so a process killed half-way leaves LATEST naming a complete
    checkpoint (and, at worst, some of `steps` still on disk).
    """
    run_dir = Path(run_dir)
    ckpt_dir, doomed = run_dir / CHECKPOINTS_DIR, set(steps)
    kept = [s for s in list_checkpoints(run_dir) if s not in doomed]
    if read_latest(ckpt_dir) != (checkpoint_name(kept[-1]) if kept else None):
        if kept:
            atomic_write_text(ckpt_dir / LATEST_FILE, checkpoint_name(kept[-1]) + "\n")
        else:
            (ckpt_dir / LATEST_FILE).unlink(missing_ok=True)
    for step in sorted(doomed):
        shutil.rmtree(ckpt_dir / checkpoint_name(step), ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    try:
        with open(path, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if (
            err.filename is None and err.errno is not None
        ):  # a failed write names no file; a full disk should say which
            err.filename = str(path)
        raise


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename the complete folder `tmp` to `final`, replacing an existing `final` safely."""
    ckpt_dir = final.parent
    if not final.exists():
        os.replace(tmp, final)
        fsync_dir(ckpt_dir)
        return
    # os.replace cannot swap non-empty folders, so the old one moves aside first. A kill
    # between the two renames must not leave LATEST naming a folder that is gone.
    if read_latest(ckpt_dir) == final.name:
        step = int(STEP_DIR.match(final.name).group(1))  # type: ignore[union-attr]
        earlier = [s for s in complete_steps(ckpt_dir) if s < step]
        if earlier:
            atomic_write_text(ckpt_dir / LATEST_FILE, checkpoint_name(max(earlier)) + "\n")
        else:
            (ckpt_dir / LATEST_FILE).unlink()
    old = ckpt_dir / f".old-{final.name}-{os.getpid()}"
    os.replace(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(old, final)
        raise
    fsync_dir(ckpt_dir)
    shutil.rmtree(old)


def _clean_stale(ckpt_dir: Path) -> None:
    """Remove what killed saves left behind; restore a displaced folder that has no successor."""
    for entry in ckpt_dir.iterdir():
        if match := _STALE_DIR.match(entry.name):
            kind, name, pid = match.group(1), match.group(2), int(match.group(3))
        elif match := _STALE_LATEST.match(entry.name):
            kind, name, pid = "latest", LATEST_FILE, int(match.group(1))
        else:
            continue
        if pid != os.getpid() and _pid_alive(pid):
            continue  # still being written (a writer that ignored run_lock): not ours to touch
        if kind == "old" and not (ckpt_dir / name).exists():
            os.replace(entry, ckpt_dir / name)  # killed between the renames: the only copy
        elif entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def load_checkpoint(
    path: str | os.PathLike[str], *, load_train_state: bool = True, allow_nonfinite: bool = False
) -> Checkpoint:
    """Load and verify a checkpoint.

    Args:
        path: A checkpoint folder, or a run folder (meaning the checkpoint named in LATEST).
        load_train_state: Whether to read train_state.pt (only resuming needs it; when False
            the file is neither verified nor read).
        allow_nonfinite: Load weights that hold NaN or inf. A checkpoint `interp` wrote never
            does (a diverged run stops before saving), so such weights are refused by default:
            an analysis of them would report numbers about a broken model.

    Returns:
        The checkpoint, with CPU tensors.

    Raises:
        CheckpointError: If a file is missing, fails its sha256 check, cannot be parsed,
            train_state.pt holds objects other than tensors and plain values, or (unless
            `allow_nonfinite`) a weight is not finite.
        FormatVersionError: If manifest.json or config.json comes from a newer `interp`.
    """
    # What `interp.store.handle.RunHandle.load_checkpoint` does for a handle opened on `path`,
    # written out here so that this module does not import the handle (which imports it).
    ckpt = resolve_checkpoint(path)
    run_dir = run_of(ckpt)
    return read_checkpoint(
        ckpt,
        run_dir,
        read_config(run_dir),
        load_train_state=load_train_state,
        allow_nonfinite=allow_nonfinite,
    )


def read_checkpoint(
    ckpt: Path,
    run_dir: Path,
    config: dict[str, Any],
    *,
    load_train_state: bool = True,
    allow_nonfinite: bool = False,
) -> Checkpoint:
    """Load and verify checkpoint folder `ckpt` of `run_dir`, whose config.json was read as `config`.

    `load_checkpoint` (and `interp.store.handle.RunHandle.load_checkpoint`, which reads the
    run's config once for all its checkpoints) resolve the folder and call this; the checks and
    errors are `load_checkpoint`'s.
    """
    manifest = read_manifest(ckpt, run_dir)
    wanted = [n for n in manifest["files"] if load_train_state or n != TRAIN_STATE_FILE]
    # Verify everything before deserialising anything, and parse the very bytes verified.
    blobs = {name: _read_verified(ckpt, name, manifest, run_dir) for name in wanted}
    state_dict = model_from_bytes(ckpt / MODEL_FILE, blobs[MODEL_FILE])
    if not allow_nonfinite and (bad := first_nonfinite(state_dict)) is not None:
        raise CheckpointError(
            f"{ckpt / MODEL_FILE} holds non-finite weights ({bad[0]!r} has {bad[1]}); its manifest is "
            "valid, so the run diverged or the file was written elsewhere",
            "load it anyway with allow_nonfinite=True (CLI: --allow-nonfinite); "
            + others_hint(run_dir, manifest["step"]),
        )
    train_state = None
    if TRAIN_STATE_FILE in blobs:
        train_state = train_state_from_bytes(ckpt / TRAIN_STATE_FILE, blobs[TRAIN_STATE_FILE])
    return Checkpoint(ckpt, run_dir, manifest["step"], config, state_dict, train_state, manifest["meta"])


def _read_verified(ckpt: Path, name: str, manifest: dict[str, Any], run_dir: Path) -> bytes:
    path = ckpt / name
    hint = others_hint(run_dir, manifest["step"])
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        message = f"checkpoint {ckpt} is missing {name}, listed in its {MANIFEST_FILE}"
        raise CheckpointError(message, hint) from None
    if hashlib.sha256(data).hexdigest() != manifest["files"][name]:
        raise CheckpointError(
            f"{path} is damaged: its sha256 does not match {MANIFEST_FILE} "
            "(e.g. a killed write or a disk error)",
            hint,
        )
    return data


def load_state_into(
    module: torch.nn.Module, state_dict: Mapping[str, Tensor], *, where: str, assign: bool = False
) -> None:
    """Load `state_dict` into `module` strictly, after checking every key and shape.

    Args:
        module: The model, built from the run's config.
        state_dict: Tensors keyed as in ``module.state_dict()``, with the same shapes.
        where: Where the weights come from (e.g. the checkpoint folder), for the message.
        assign: Make `state_dict`'s tensors the module's (keeping each parameter's
            requires_grad) instead of copying into the old ones, so that tensors taken from the
            module before (views of its weights) keep the old values.

    Raises:
        CheckpointError: Naming the first missing key, unexpected key, or shape mismatch.
    """
    expected = module.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    problem = None
    if missing:
        problem = f"has no weight {missing[0]!r} that the model needs ({len(missing)} missing)"
    elif unexpected:
        problem = f"has weight {unexpected[0]!r} that the model does not ({len(unexpected)} unexpected)"
    else:
        for key, target in expected.items():
            found, wanted = list(state_dict[key].shape), list(target.shape)
            if found != wanted:
                problem = f"has weight {key!r} of shape {found}, but the model expects {wanted}"
                break
    if problem is not None:
        raise CheckpointError(f"{where} {problem}", _MISMATCH)
    module.load_state_dict(state_dict, strict=True, assign=assign)
