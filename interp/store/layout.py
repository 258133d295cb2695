"""The names in a run folder and where its checkpoints are, told from the folder alone (no torch).

::

    runs/<name>/checkpoints/step_000100/manifest.json   format_version, step, sha256 per file, meta
    runs/<name>/checkpoints/LATEST                      name of the newest checkpoint folder

`interp.store.checkpoint` writes and loads checkpoints (and needs torch for their tensors);
this module names the run's config and checkpoint folders (`checkpoint_dir`, `run_of` and
`STEP_DIR`: one naming, written and parsed here) and only reads folder names and JSON, so the
CLI can refuse a missing or damaged run or checkpoint folder before it imports torch
(`interp.cli.preflight`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interp.errors import CheckpointError, FormatVersionError

FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
CHECKPOINTS_DIR = "checkpoints"

MODEL_FILE = "model.safetensors"
TRAIN_STATE_FILE = "train_state.pt"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "LATEST"
STEP_DIR = re.compile(r"^step_(\d{6,})$")
_EXPECTED = (
    "expected a checkpoint folder such as runs/<name>/checkpoints/step_000100 "
    "or a run folder holding config.json and checkpoints/LATEST"
)


def checkpoint_name(step: int) -> str:
    """The folder name of the checkpoint of `step` (``step_000100``)."""
    return f"step_{step:06d}"


def checkpoint_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    """The folder of the checkpoint of `step` in `run_dir` (``run/checkpoints/step_000100``)."""
    return Path(run_dir) / CHECKPOINTS_DIR / checkpoint_name(step)


def run_of(ckpt: str | os.PathLike[str]) -> Path:
    """The run folder a checkpoint folder belongs to (the inverse of `checkpoint_dir`)."""
    return Path(ckpt).parent.parent


def read_json(path: Path, *, what: str) -> dict[str, Any]:
    """Read a JSON object from `path`, checking its `format_version`.

    Args:
        path: The file.
        what: What the file should be, for the error message (e.g. "a run config").

    Raises:
        CheckpointError: If the file is missing, not valid JSON, or not a JSON object.
        FormatVersionError: If it was written by a newer `interp`.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing {path} (expected {what})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); the file is damaged") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} holds a JSON {type(data).__name__}, expected an object")
    check_format_version(data, path)
    return data


def check_format_version(data: Mapping[str, Any], path: Path) -> None:
    """Refuse a file whose `format_version` this `interp` cannot read.

    Raises:
        FormatVersionError: If the version is newer than `FORMAT_VERSION`.
        CheckpointError: If it is missing or not a positive integer.
    """
    version = data.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{path} has no valid format_version (found {version!r})")
    if version > FORMAT_VERSION:
        from interp import __version__

        raise FormatVersionError(
            f"{path} has format_version {version}, but interp {__version__} reads "
            f"format_version {FORMAT_VERSION} at most",
            "upgrade interp to read it",
        )


def read_latest(ckpt_dir: Path) -> str | None:
    """The folder name LATEST holds in `ckpt_dir` (stripped), or None if there is no LATEST."""
    try:
        return (ckpt_dir / LATEST_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None


def complete_steps(ckpt_dir: Path) -> list[int]:
    """The steps in `ckpt_dir` whose folders hold a manifest (complete checkpoints), ascending."""
    if not ckpt_dir.is_dir():
        return []
    steps = []
    for entry in ckpt_dir.iterdir():
        match = STEP_DIR.match(entry.name)
        if match and (entry / MANIFEST_FILE).is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[int]:
    """The steps of a run's complete checkpoints, ascending (temporary folders are skipped).

    Raises:
        CheckpointError: If `run_dir` is not a folder.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"run folder {run_dir} does not exist")
    return complete_steps(run_dir / CHECKPOINTS_DIR)


def others_hint(run_dir: Path, step: int | None) -> str:
    """Name the earlier checkpoints of a run, to suggest one when `step`'s is unusable."""
    steps = [s for s in complete_steps(run_dir / CHECKPOINTS_DIR) if step is None or s < step]
    if not steps:
        return "the run has no earlier checkpoint; train it again"
    names = ", ".join(str(run_dir / CHECKPOINTS_DIR / checkpoint_name(s)) for s in steps[-3:])
    return f"use an earlier checkpoint: {names}"


def is_checkpoint_folder(path: Path) -> bool:
    """True for a checkpoint folder, False for a run folder (told from names alone).

    Raises:
        CheckpointError: If `path` does not exist, is a file, or is neither kind of folder.
    """
    if not path.exists():
        raise CheckpointError(f"{path} does not exist", _EXPECTED)
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a folder", _EXPECTED)
    if STEP_DIR.match(path.name) or (path / MANIFEST_FILE).exists():
        return True
    if not ((path / CONFIG_FILE).exists() or (path / CHECKPOINTS_DIR).is_dir()):
        raise CheckpointError(f"{path} is neither a checkpoint folder nor a run folder", _EXPECTED)
    return False


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """Turn a checkpoint folder, or a run folder meaning its LATEST, into a checkpoint folder.

    Raises:
        CheckpointError: If `path` does not exist, is neither kind of folder, or names a run
            without a checkpoint.
    """
    path = Path(path)
    if is_checkpoint_folder(path):
        return path
    ckpt_dir = path / CHECKPOINTS_DIR
    latest = read_latest(ckpt_dir)
    if latest is None:
        raise CheckpointError(
            f"run folder {path} has no checkpoint yet (expected {ckpt_dir / LATEST_FILE} "
            "naming its newest checkpoint folder)",
            others_hint(path, None) if complete_steps(ckpt_dir) else None,
        )
    if not STEP_DIR.match(latest):
        raise CheckpointError(
            f"{ckpt_dir / LATEST_FILE} holds {latest!r}, not a checkpoint folder name such as "
            "step_000100; the file is damaged",
            others_hint(path, None),
        )
    if not (ckpt_dir / latest).is_dir():
        raise CheckpointError(
            f"{ckpt_dir / LATEST_FILE} names {latest}, which does not exist", others_hint(path, None)
        )
    return ckpt_dir / latest


def read_manifest(ckpt: Path, run_dir: Path) -> dict[str, Any]:
    """Read and check checkpoint `ckpt`'s manifest.json (its step, its file list, its meta).

    Raises:
        CheckpointError: If it is missing, damaged or malformed, or names another step.
    """
    path = ckpt / MANIFEST_FILE
    if not path.is_file():
        raise CheckpointError(
            f"checkpoint {ckpt} has no {MANIFEST_FILE}; it is incomplete or damaged",
            others_hint(run_dir, None),
        )
    data = read_json(path, what="a checkpoint manifest")
    files, step, meta = data.get("files"), data.get("step"), data.get("meta", {})
    valid_files = (
        isinstance(files, dict)
        and MODEL_FILE in files
        and set(files) <= {MODEL_FILE, TRAIN_STATE_FILE}  # never a path a forger chose
        and all(isinstance(v, str) for v in files.values())
    )
    valid_step = isinstance(step, int) and not isinstance(step, bool)
    if not (valid_files and valid_step and isinstance(meta, dict)):
        raise CheckpointError(f"{path} is malformed (expected step, files with {MODEL_FILE}, and meta)")
    match = STEP_DIR.match(ckpt.name)
    if match and int(match.group(1)) != step:
        raise CheckpointError(f"{path} says step {step}, but its folder is {ckpt.name}")
    return {**data, "meta": meta}
