"""Importing a series: a folder of TransformerLens-convention state dicts, saved by any training
loop, becomes one run folder with its checkpoints in order (`import_series`; the command line's
``interp import --series DIR``).

Which file is which step:

* by default, every ``*.pt``, ``*.pth`` and ``*.safetensors`` file in DIR, its step the **last
  run of digits in the file name** (``step_100.pt``, ``ckpt-000200.safetensors``, ``model_300.pth``
  are steps 100, 200, 300); the steps must be evenly spaced from the first to the last (a state
  dict every N steps), so a missing file is refused as a gap rather than silently skipped;
* or a manifest, ``DIR/series.json`` (or ``--manifest FILE``): ``{"checkpoints": [{"file":
  "a.pt", "step": 0}, ...]}``; its steps may be spaced any way (log-spaced, say), and only the
  files it names are read.

Each file is a plain state dict, or ``{"state_dict": ..., "config": ...}`` as `interp import`
reads one; the TransformerLens config is ``--config``, else DIR/config.json, else the one in the
files (all must agree). Every file is read safely (`analyses.importing.read_transformer_lens_checkpoint`:
safetensors or ``torch.load(weights_only=True)``, never pickled code) and checked before anything
is written: readable, the same parameter names and shapes as the first, finite, and unchanged
between the check and the copy (sha256). Nothing is written on any error. Then the run folder
gets config.json (``imported`` lists every file, its step and sha256), one checkpoint per step
with the split digests, the metrics of each checkpoint on the task's splits, and DONE.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analyses.importing import check_fits, plugin_record, read_transformer_lens_checkpoint
from interp.errors import CheckpointError, ConfigError

SUFFIXES = (".pt", ".pth", ".safetensors")
MANIFEST = "series.json"
TL_BUFFERS = ("IGNORE", "mask")  # TransformerLens's attention buffers (IGNORE is -inf), not parameters
STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")
"""The step of a file: the last run of digits in its name (without the suffix)."""


def series_files(folder: Path, manifest: Path | None = None) -> list[tuple[int, Path]]:
    """The ``(step, file)`` pairs of a series folder, in step order (see the module docstring).

    Raises:
        CheckpointError: If the folder or a named file is missing, a name has no step, two files
            share a step, or (without a manifest) the steps are not evenly spaced.
    """
    if not folder.is_dir():
        raise CheckpointError(f"--series {folder} is not a folder", "give the folder of saved state dicts")
    manifest = manifest or (folder / MANIFEST if (folder / MANIFEST).is_file() else None)
    pairs = _from_manifest(folder, manifest) if manifest else _from_names(folder)
    if not pairs:
        raise CheckpointError(
            f"{folder} holds no {', '.join(SUFFIXES)} files", "save state dicts there first"
        )
    steps = [step for step, _ in pairs]
    for (a, first), (b, second) in zip(pairs, pairs[1:]):
        if a == b:
            raise CheckpointError(f"{first.name} and {second.name} are both step {a}", "one file per step")
    if manifest is None and len(steps) > 2:
        spacing = steps[1] - steps[0]
        for a, b in zip(steps, steps[1:]):
            if b - a != spacing:
                raise CheckpointError(
                    f"a gap in the series {folder}: steps {a} to {b}, where the first are {spacing} apart "
                    f"(step {a + spacing} is missing)",
                    f"add the missing file, or list the steps in {MANIFEST} to import them as they are",
                )
    return pairs


def _from_names(folder: Path) -> list[tuple[int, Path]]:
    pairs = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()):
        match = STEP_IN_NAME.search(path.stem)
        if match is None:
            raise CheckpointError(
                f"{path.name} has no step in its name",
                f"name files like step_100.pt, or list them in {MANIFEST}",
            )
        pairs.append((int(match.group(1)), path))
    return sorted(pairs)


def _from_manifest(folder: Path, manifest: Path) -> list[tuple[int, Path]]:
    try:
        entries = json.loads(manifest.read_text())["checkpoints"]
        pairs = [(int(e["step"]), folder / str(e["file"])) for e in entries]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"{manifest} is not a series manifest ({type(err).__name__}: {err})",
            '{"checkpoints": [{"file": "step_0.pt", "step": 0}, ...]}',
        ) from None
    for step, path in pairs:
        if step < 0 or not path.is_file():
            raise CheckpointError(
                f"{manifest} names {path.name} (step {step}), which is not a file in {folder}"
            )
    return sorted(pairs)


def _read(path: Path, config_path: Path | None) -> tuple[dict, dict, str]:
    """The state dict, TransformerLens config and sha256 of one file (read safely)."""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    state, config = read_transformer_lens_checkpoint(path, config_path)
    return state, config, sha


def _check_file(
    path: Path, state: Mapping[str, Any], shapes: dict[str, tuple], config: dict, first: dict
) -> None:
    import torch

    got = {k: tuple(v.shape) for k, v in state.items()}
    if got != shapes:
        names = sorted(set(got) ^ set(shapes)) or [k for k in shapes if got[k] != shapes[k]]
        name = names[0]
        raise CheckpointError(
            f"mixed shapes in the series: {path.name} has {name} "
            f"{got.get(name, 'missing')}, the first file {shapes.get(name, 'missing')}",
            "every file of a series must be the same model",
        )
    if config != first:
        key = next(k for k in {**first, **config} if first.get(k) != config.get(k))
        raise CheckpointError(
            f"{path.name} has another TransformerLens config than the first file ({key}: "
            f"{config.get(key)!r} vs {first.get(key)!r})",
            "every file of a series must be the same model",
        )
    bad = next(
        (
            k
            for k, v in state.items()
            if k.rsplit(".", 1)[-1] not in TL_BUFFERS
            and v.is_floating_point()
            and not torch.isfinite(v).all()
        ),
        None,
    )
    if bad is not None:
        raise CheckpointError(f"{path.name} holds NaN or inf in {bad}", "leave the diverged checkpoints out")


def import_series(
    folder: str | Path,
    task_config: Mapping[str, Any],
    out: str | Path,
    *,
    data_seed: int = 0,
    loss: str = "cross_entropy",
    config_path: str | Path | None = None,
    manifest: str | Path | None = None,
) -> dict[str, Any]:
    """Turn a folder of TransformerLens-convention state dicts into the run folder `out`.

    Args:
        folder: The series folder (see the module docstring for which file is which step).
        task_config: The task the model was trained on, ``{"name": ..., **fields}``.
        out: The run folder to create; it must not exist yet.
        data_seed: The seed of the task's splits (their digests go into every checkpoint).
        loss: The loss the model was trained with (what the metrics report).
        config_path: A TransformerLens ``config.json`` (default: DIR/config.json, else in the files).
        manifest: A series manifest (default: DIR/series.json if present).

    Returns:
        The run's summary (its DONE): the steps, and the last checkpoint's metrics.

    Raises:
        CheckpointError: For a bad series (a gap, mixed shapes, a file that needs pickled code,
            an unreadable or non-finite file); nothing is written then.
        ConfigError: For an unsupported TransformerLens config, a task it does not fit, or an
            `out` that exists.
    """
    from models.convert import from_transformer_lens_config_dict
    from tasks import task_from_dict

    folder, out = Path(folder), Path(out)
    if out.exists():
        raise ConfigError(f"--out {out} exists", "give a new run folder (an import never writes into a run)")
    task = task_from_dict(task_config, where="--task")  # before reading any file
    pairs = series_files(folder, Path(manifest) if manifest else None)
    if config_path is None and (folder / "config.json").is_file():
        config_path = folder / "config.json"
    config_path = Path(config_path) if config_path else None
    checked: list[tuple[int, Path, str]] = []
    shapes = first = None
    for step, path in pairs:  # every file checked before anything is written
        state, tl_config, sha = _read(path, config_path)
        if shapes is None:
            shapes, first = {k: tuple(v.shape) for k, v in state.items()}, tl_config
            cfg = from_transformer_lens_config_dict(tl_config)
            check_fits(cfg, task)
        _check_file(path, state, shapes, tl_config, first)
        checked.append((step, path, sha))
    return _write(folder, out, task, cfg, checked, config_path, data_seed=data_seed, loss=loss)


def _write(folder, out, task, cfg, checked, config_path, *, data_seed: int, loss: str) -> dict[str, Any]:  # noqa: ANN001
    from interp.metrics import evaluate
    from interp.splits import split_digests
    from interp.store import open_run
    from models import config_to_dict
    from models.convert import from_transformer_lens_state_dict

    splits = task.splits(data_seed)
    config = {
        "model": config_to_dict(cfg),
        "task": task.to_dict(),
        "train": {"data_seed": data_seed, "loss": loss},
        "imported": {
            "source": str(folder.resolve()),
            "format": "transformer_lens series",
            "files": [{"file": path.name, "step": step, "sha256": sha} for step, path, sha in checked],
        },
        **plugin_record(task.name),
    }
    model = metrics = None
    with open_run(out, config, digests=split_digests(splits)) as run:
        for step, path, sha in checked:
            state, _, again = _read(path, config_path)
            if again != sha:
                raise CheckpointError(f"{path} changed while the series was imported", "import it again")
            model = from_transformer_lens_state_dict(state, cfg).eval()
            metrics = evaluate(model.readout, splits, loss)
            run.save(step, model.state_dict())
            run.log({"step": step, **metrics})
        steps = [step for step, _, _ in checked]
        return run.finish({"imported_from": str(folder), "steps": steps, "final": metrics})
