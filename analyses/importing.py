"""Importing a TransformerLens-convention checkpoint: it becomes one of our run folders.

`import_checkpoint` (one file; `interp import`) and `analyses.series_import.import_series` (a
folder of them; `interp import --series`) are the same calls from a notebook.

Published grokking and toy-model checkpoints are usually a state dict and a TransformerLens
config dict, either together in a torch file (``{"state_dict": ..., "config": ...}``) or as
``model.safetensors`` beside a ``config.json``. Importing one:

1. reads the file without running code: safetensors, or ``torch.load(weights_only=True)``.
   TransformerLens config dicts hold numpy scalars (``attn_scale``, ``initializer_range``), so
   exactly the numpy scalar and dtype constructors (data, not code) are allowed besides torch's
   own list; a file that needs any other global (a pickled config *object*, a whole model) is
   refused with a message naming the globals, never unpickled;
2. converts the config (`models.convert.from_transformer_lens_config_dict`, which refuses
   TransformerLens features our model lacks) and the weights (names and shapes checked);
3. builds the user's task, checks that the vocabulary sizes fit, and writes a run folder through
   `interp.store.open_run`: config.json (model, task, ``train`` with the data seed and loss, and
   an ``imported`` section naming the file and its sha256), one checkpoint with the split digests
   (so `load_subject` and every analysis work), the imported model's metrics, and DONE.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interp.errors import CheckpointError, ConfigError

STATE_KEYS = ("state_dict", "model_state_dict", "model", "weights")
CONFIG_KEYS = ("config", "cfg")
# Globals a TransformerLens config dict needs beyond torch's weights-only list: numpy scalars.
NUMPY_DATA = ("numpy.dtype", "numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar")
RESAVE = (
    "re-save it as plain data: torch.save({'state_dict': model.state_dict(), 'config': model.cfg.to_dict()}, "
    "path), or model.safetensors beside config.json"
)


def _numpy_data_globals() -> list[Any]:
    """The numpy constructors of numeric scalars: the scalar, `numpy.dtype`, and (numpy >= 1.25,
    which pickles a dtype by its class) the numeric dtype classes. They build data from bytes.
    """
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    kinds = [
        f"{k}{bits}DType"
        for k, sizes in (("Float", (16, 32, 64)), ("Int", (8, 16, 32, 64)), ("UInt", (8, 16, 32, 64)))
        for bits in sizes
    ] + ["BoolDType"]
    classes = [getattr(np.dtypes, k) for k in kinds if hasattr(getattr(np, "dtypes", None), k)]
    return [core.multiarray.scalar, np.dtype, *classes]


def _torch_load(path: Path) -> Any:
    """``torch.load(weights_only=True)``, allowing numpy scalars; refuse anything that needs code."""
    import torch
    from torch.serialization import get_unsafe_globals_in_checkpoint, safe_globals

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        pass
    except (RuntimeError, EOFError, OSError) as err:
        raise CheckpointError(f"{path} is not a readable torch file ({err})") from None
    needed = get_unsafe_globals_in_checkpoint(path)  # reads the pickle's opcodes; runs nothing
    code = [n for n in needed if n not in NUMPY_DATA and not n.startswith("numpy.dtypes.")]
    if code:
        raise CheckpointError(
            f"{path} needs pickled code to load ({', '.join(code)}); interp loads files with "
            "torch.load(weights_only=True) and never runs code from them",
            RESAVE,
        )
    try:
        with safe_globals(_numpy_data_globals()):
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{path} needs more than plain data to load ({str(err).splitlines()[-1][:200]})", RESAVE
        ) from None


def _pick(data: Mapping[str, Any], keys: tuple[str, ...], what: str, path: Path) -> Any:
    for key in keys:
        if key in data:
            return data[key]
    raise CheckpointError(
        f"{path} holds no {what} (looked for keys {', '.join(keys)}; found {', '.join(map(str, data))})",
        RESAVE,
    )


def read_transformer_lens_checkpoint(path: Path, config_path: Path | None = None) -> tuple[dict, dict]:
    """The state dict and TransformerLens config dict of a ``.pt``/``.pth`` or ``.safetensors`` file.

    Args:
        path: The checkpoint file.
        config_path: A ``config.json`` (default for safetensors: the one beside the file; for a torch
            file: the config stored in it).

    Raises:
        CheckpointError: If the file is missing, unreadable, needs pickled code, or lacks a part.
    """
    import json

    import safetensors.torch
    from torch import Tensor

    if not path.is_file():
        raise CheckpointError(f"no checkpoint file {path}", "give a .pt/.pth file or a .safetensors file")
    if path.suffix == ".safetensors":
        try:
            state = safetensors.torch.load_file(path)
        except Exception as err:  # noqa: BLE001 - safetensors raises several types for a damaged file
            raise CheckpointError(f"{path} is not a readable safetensors file ({err})") from None
        config_path = config_path or path.with_name("config.json")
        config = None
    else:
        data = _torch_load(path)
        if not isinstance(data, Mapping):
            raise CheckpointError(
                f"{path} holds a {type(data).__name__}, not a dict of state dict and config", RESAVE
            )
        is_state = all(isinstance(v, Tensor) for v in data.values())
        state = dict(data) if is_state else dict(_pick(data, STATE_KEYS, "state dict", path))
        config = None if config_path or is_state else _pick(data, CONFIG_KEYS, "TransformerLens config", path)
    if config is None:
        if config_path is None or not config_path.is_file():
            raise CheckpointError(f"no TransformerLens config for {path}", "pass --config config.json")
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{config_path} is not a JSON config ({err})") from None
    if not isinstance(config, Mapping):
        raise CheckpointError(f"the config of {path} is a {type(config).__name__}, not a dict", RESAVE)
    return state, dict(config)


def plugin_record(task_name: str) -> dict[str, Any]:
    """The ``plugins`` section of an imported run's config.json if its task came from a plugin
    (as a trained run's): opening the run without the plugin then says what to install.
    """
    from interp.plugins import provenance

    plugin = provenance("interp.tasks", task_name)
    return {"plugins": {"interp.tasks": {task_name: plugin}}} if plugin else {}


def check_fits(cfg: Any, task: Any) -> None:
    """Refuse a model config whose vocabularies or context do not fit `task`'s inputs and labels."""
    for name in ("d_vocab", "d_vocab_out"):
        if getattr(cfg, name) != getattr(task, name):
            raise ConfigError(
                f"the checkpoint's {name}={getattr(cfg, name)} does not fit task {task.to_dict()} "
                f"({name}={getattr(task, name)})",
                "give the task the model was trained on",
            )
    if cfg.n_ctx < task.n_ctx:
        raise ConfigError(
            f"the checkpoint's n_ctx={cfg.n_ctx} is shorter than the task's inputs ({task.n_ctx})"
        )


def import_checkpoint(
    source: Path,
    task_config: Mapping[str, Any],
    out: Path,
    *,
    data_seed: int = 0,
    step: int = 0,
    loss: str = "cross_entropy",
    config_path: Path | None = None,
) -> dict[str, Any]:
    """Turn a TransformerLens-convention checkpoint into the run folder `out` (see the module docstring).

    Returns:
        The run's summary (its DONE): the source, its sha256, the step and the imported model's metrics.

    Raises:
        CheckpointError: For an unreadable or unsafe file, or weights that do not fit the config.
        ConfigError: For an unsupported config, a task it does not fit, or an existing other run in `out`.
    """
    from interp.metrics import evaluate
    from interp.splits import split_digests
    from interp.store import open_run
    from models import config_to_dict
    from models.convert import from_transformer_lens_config_dict, from_transformer_lens_state_dict
    from tasks import task_from_dict

    state, tl_config = read_transformer_lens_checkpoint(source, config_path)
    cfg = from_transformer_lens_config_dict(tl_config)
    task = task_from_dict(task_config, where="--task")
    check_fits(cfg, task)
    model = from_transformer_lens_state_dict(state, cfg).eval()
    splits = task.splits(data_seed)
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    config = {
        "model": config_to_dict(cfg),
        "task": task.to_dict(),
        "train": {"data_seed": data_seed, "loss": loss},
        "imported": {
            "source": str(source.resolve()),
            "sha256": sha,
            "format": "transformer_lens",
            "step": step,
        },
        **plugin_record(task.name),
    }
    with open_run(out, config, digests=split_digests(splits)) as run:
        if (done := run.finished()) is not None:
            return done
        metrics = evaluate(model.readout, splits, loss)
        run.save(step, model.state_dict())
        run.log({"step": step, **metrics})
        return run.finish({"imported_from": str(source), "sha256": sha, "step": step, "final": metrics})
