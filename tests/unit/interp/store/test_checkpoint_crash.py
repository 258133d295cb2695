"""A save killed for real (SIGKILL, in a child process) at any point leaves a loadable run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from interp.store.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint

# The child saves a checkpoint and SIGKILLs itself at the chosen point: half-way through
# writing model.safetensors, or just before the n-th os.replace of the save.
CHILD = r"""
import os, signal, sys
import torch
import interp.store.checkpoint as checkpoint

run_dir, point, step = sys.argv[1], sys.argv[2], int(sys.argv[3])

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "mid_file":
    write = checkpoint._write_synced
    def half_then_die(path, data):
        if path.name == "model.safetensors":
            with open(path, "xb") as f:
                f.write(data[: len(data) // 2])
                f.flush()
            die()
        write(path, data)
    checkpoint._write_synced = half_then_die
else:
    replace, calls = os.replace, []
    def replace_or_die(src, dst):
        calls.append(dst)
        if len(calls) == int(point.split("_")[1]):
            die()
        replace(src, dst)
    os.replace = replace_or_die

checkpoint.save_checkpoint(run_dir, step, {"w": torch.full((8, 8), -1.0)}, {"rng": torch.get_rng_state()})
raise SystemExit("the save finished instead of being killed")
"""


def weights(step: int) -> dict[str, torch.Tensor]:
    return {"w": torch.arange(64, dtype=torch.float32).reshape(8, 8) * step}


def kill_a_save(run_dir: Path, point: str, step: int) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir), point, str(step)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


@pytest.mark.parametrize(
    ("point", "listed"),
    [
        ("mid_file", [1]),  # model.safetensors half-written in the temporary folder
        ("replace_1", [1]),  # temporary folder complete, not yet renamed
        ("replace_2", [1, 2]),  # folder renamed, LATEST's temporary file not yet renamed
    ],
)
def test_a_killed_save_leaves_the_previous_checkpoint_loadable(
    run_dir: Path, point: str, listed: list[int]
) -> None:
    save_checkpoint(run_dir, 1, weights(1), {"rng": torch.get_rng_state()})
    kill_a_save(run_dir, point, 2)
    assert any(p.name.startswith(".") for p in (run_dir / "checkpoints").iterdir())  # leftovers
    loaded = load_checkpoint(run_dir)
    assert loaded.step == 1 and torch.equal(loaded.state_dict["w"], weights(1)["w"])
    assert list_checkpoints(run_dir) == listed
    if 2 in listed:  # complete, only LATEST was not moved on yet
        assert torch.equal(
            load_checkpoint(run_dir / "checkpoints" / "step_000002").state_dict["w"], torch.full((8, 8), -1.0)
        )

    save_checkpoint(run_dir, 3, weights(3))  # the next save cleans up
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
    assert load_checkpoint(run_dir).step == 3
    assert list_checkpoints(run_dir) == [*listed, 3]


def test_a_save_killed_while_replacing_the_same_step(run_dir: Path) -> None:
    """Re-saving the LATEST step moves the old folder aside; a kill then must not lose LATEST."""
    save_checkpoint(run_dir, 1, weights(1))
    save_checkpoint(run_dir, 2, weights(2))
    # os.replace calls: LATEST moved back to step 1, old step 2 moved aside, new step 2 moved in.
    kill_a_save(run_dir, "replace_3", 2)
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names[0].startswith(".old-step_000002-") and names[1].startswith(".tmp-step_000002-")
    assert names[2:] == ["LATEST", "step_000001"]
    assert load_checkpoint(run_dir).step == 1
    save_checkpoint(run_dir, 3, weights(3))  # restores the old step 2, its only copy
    assert list_checkpoints(run_dir) == [1, 2, 3]
    assert torch.equal(
        load_checkpoint(run_dir / "checkpoints" / "step_000002").state_dict["w"], weights(2)["w"]
    )
    assert not [p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]
