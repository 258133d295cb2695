"""A command reads a run's config.json once (`interp.store.handle.RunHandle`), whatever the
number of checkpoints it walks: `interp patch --ckpt RUN` (whose argument check opens the run
before torch loads and hands it on) and `interp evolve` over runs of 2 and 5 checkpoints (of
``drift``, which also loads the run's first checkpoint at every step).

Every way of opening a file that the code could take is counted (`open`, `io.open`, `os.open`
and `Path.open` / `read_text` / `read_bytes`), once per outermost call, for any path named
config.json.
"""

from __future__ import annotations

import builtins
import io
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from interp.cli import main
from interp.store import list_checkpoints
from interp.training import TrainConfig, train
from models import build_model, preset_config
from tasks import MPSPTask

TASK = MPSPTask(vocab=10, n=4, n_train=48, n_val=16, n_adv=16, r=0.75)


def tiny_run(folder: Path, checkpoints: int) -> Path:
    """A trained run with `checkpoints` checkpoints (steps 0, 1, ..., checkpoints - 1)."""
    config = TrainConfig(
        epochs=checkpoints - 1, eval_every=1, eval_log_points=0, checkpoint_every=1, checkpoint_log_points=0
    )
    train(folder, build_model(preset_config("mpsp-1l1h", TASK), seed=0), TASK, config, progress=False)
    assert len(list_checkpoints(folder)) == checkpoints
    return folder


class OpenCounter:
    """Counts the opens of files named config.json (nested calls, e.g. read_text -> open, count once)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opens: Counter[str] = Counter()
        self._inside = threading.local()
        opener = builtins.open
        for owner, name, original in [
            (builtins, "open", opener),
            (io, "open", opener),
            (os, "open", os.open),
            (Path, "open", Path.open),
            (Path, "read_text", Path.read_text),
            (Path, "read_bytes", Path.read_bytes),
        ]:
            monkeypatch.setattr(owner, name, self._wrap(original))

    def _wrap(self, original):  # noqa: ANN001, ANN202 - any opener
        def counted(path, *args, **kwargs):  # noqa: ANN001, ANN202
            outermost = not getattr(self._inside, "active", False)
            if outermost and isinstance(path, (str, bytes, os.PathLike)):
                if os.path.basename(os.fsdecode(path)) == "config.json":
                    self.opens[str(Path(os.fsdecode(path)).resolve())] += 1
            self._inside.active = True
            try:
                return original(path, *args, **kwargs)
            finally:
                self._inside.active = not outermost

        return counted

    @property
    def total(self) -> int:
        return sum(self.opens.values())


def invoke(*args: str) -> None:
    with pytest.raises(SystemExit) as info:  # in this process, so the counter sees every open
        main(list(args))
    assert info.value.code == 0


def test_the_counter_sees_every_way_of_reading_a_config(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text("{}")
    counter = OpenCounter(monkeypatch)
    path.read_text()
    path.read_bytes()
    with open(path) as f:
        f.read()
    with path.open() as f:
        f.read()
    os.close(os.open(path, os.O_RDONLY))
    (tmp_path / "other.json").write_text("{}")
    assert counter.total == 5


def test_patch_reads_the_config_once(tmp_path, monkeypatch):
    run = tiny_run(tmp_path / "run", 3)
    counter = OpenCounter(monkeypatch)
    invoke("patch", "--ckpt", str(run), "--max-examples", "8", "--n-boot", "10", "--out", str(tmp_path / "o"))
    assert dict(counter.opens) == {str((run / "config.json").resolve()): 1}


@pytest.mark.parametrize("checkpoints", [2, 5])
def test_evolve_reads_the_config_once_whatever_the_number_of_checkpoints(tmp_path, monkeypatch, checkpoints):
    run = tiny_run(tmp_path / "run", checkpoints)
    counter = OpenCounter(monkeypatch)
    out = tmp_path / "evolution"
    invoke("evolve", "--run", str(run), "--analysis", "drift", "--out", str(out), "--no-progress")
    assert (out / "drift.csv").is_file()
    assert len(list((out / "cache" / "drift").iterdir())) == checkpoints  # every checkpoint analysed
    assert dict(counter.opens) == {str((run / "config.json").resolve()): 1}
