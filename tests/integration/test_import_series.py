"""`interp import --series`: a folder of state dicts that a plain PyTorch loop saved while training
a TransformerLens `HookedTransformer` becomes one run folder that `evolve` reads; bad series (a
gap, mixed shapes, a file that needs pickled code) are refused in one line, exit 2, nothing written.
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from analyses import evolve, load_subject
from analyses.series_import import import_series, series_files
from interp.cli import main
from interp.errors import CheckpointError
from tasks import ModAddTask

TASK = ModAddTask(p=11, train_frac=0.6)
EVERY, STEPS = 10, 30


def _model(d_model: int = 16) -> HookedTransformer:
    cfg = HookedTransformerConfig(
        n_layers=1, n_heads=2, d_model=d_model, d_head=d_model // 2, d_mlp=2 * d_model, n_ctx=TASK.n_ctx,
        d_vocab=TASK.d_vocab, d_vocab_out=TASK.d_vocab_out, act_fn="relu", normalization_type=None,
        default_prepend_bos=False, seed=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return HookedTransformer(cfg)


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """What a user's own loop leaves: ckpts/step_<N>.pt every 10 steps and the model's config.json."""
    folder = tmp_path_factory.mktemp("loop") / "ckpts"
    folder.mkdir()
    model = _model()
    train = TASK.splits(0)["train"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    (folder / "config.json").write_text(json.dumps(model.cfg.to_dict(), default=str))
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            torch.save(model.state_dict(), folder / f"step_{step}.pt")
        if step == STEPS:
            break
        loss = torch.nn.functional.cross_entropy(model(train.tokens)[:, -1], train.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return folder, model.eval()


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_a_series_from_a_plain_loop_becomes_one_run_that_evolve_reads(series, tmp_path, capsys):
    folder, trained = series
    out = tmp_path / "run"
    code, printed, err = _cli(capsys, "import", "--series", str(folder), "--task", "modadd", "--p", "11",
                              "--train-frac", "0.6", "--out", str(out))  # fmt: skip
    assert code == 0, err
    assert "imported 4 checkpoints" in printed
    config = json.loads((out / "config.json").read_text())
    assert [f["step"] for f in config["imported"]["files"]] == [0, 10, 20, 30]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 10, 20, 30] and "test/acc" in metrics[0]

    subject = load_subject(out)  # the last checkpoint: the loop's final weights, the same function
    assert subject.step == STEPS
    tokens = subject.split("test").tokens
    with torch.no_grad():
        torch.testing.assert_close(
            subject.model.readout(tokens), trained(tokens)[:, -1], rtol=1e-5, atol=1e-5
        )
        train = subject.split("train")
        loss = torch.nn.functional.cross_entropy(trained(train.tokens)[:, -1], train.labels).item()
    assert metrics[-1]["train/loss"] == pytest.approx(loss, rel=1e-4)  # metrics computed on the splits

    evolution = evolve(out, "progress", progress=False)
    assert evolution.steps == [0, 10, 20, 30]
    frame = evolution.to_frame()
    assert set(frame["step"]) == {0, 10, 20, 30} and "train/loss" in frame.columns


def _refused(capsys, folder, out) -> str:
    code, _, err = _cli(capsys, "import", "--series", str(folder), "--task", "modadd", "--p", "11",
                        "--train-frac", "0.6", "--out", str(out))  # fmt: skip
    assert code == 2 and not out.exists(), err
    (line,) = err.strip().splitlines()
    return line


def test_a_gap_in_the_steps_is_refused(series, tmp_path, capsys):
    folder = shutil.copytree(series[0], tmp_path / "ckpts")
    (folder / "step_20.pt").unlink()
    line = _refused(capsys, folder, tmp_path / "run")
    assert "a gap in the series" in line and "step 20 is missing" in line


def test_a_manifest_imports_uneven_steps(series, tmp_path):
    folder = shutil.copytree(series[0], tmp_path / "ckpts")
    (folder / "step_20.pt").unlink()
    (folder / "series.json").write_text(
        json.dumps({"checkpoints": [{"file": f"step_{s}.pt", "step": s} for s in (0, 10, 30)]})
    )
    assert [s for s, _ in series_files(folder)] == [0, 10, 30]
    done = import_series(folder, TASK.to_dict(), tmp_path / "run")
    assert done["steps"] == [0, 10, 30]


def test_mixed_shapes_are_refused(series, tmp_path, capsys):
    folder = shutil.copytree(series[0], tmp_path / "ckpts")
    torch.save(_model(d_model=32).state_dict(), folder / "step_20.pt")
    line = _refused(capsys, folder, tmp_path / "run")
    assert "mixed shapes in the series: step_20.pt has" in line


class Payload:
    """An object a pickle would rebuild by running code (never done: the file is refused)."""


def test_a_file_that_needs_pickled_code_is_refused(series, tmp_path, capsys):
    folder = shutil.copytree(series[0], tmp_path / "ckpts")
    state = torch.load(folder / "step_20.pt", weights_only=True)
    torch.save({"state_dict": state, "config": Payload()}, folder / "step_20.pt")
    line = _refused(capsys, folder, tmp_path / "run")
    assert "step_20.pt needs pickled code to load" in line and "Payload" in line


def test_a_name_without_a_step_is_refused(series, tmp_path):
    folder = shutil.copytree(series[0], tmp_path / "ckpts")
    shutil.copy(folder / "step_0.pt", folder / "final.pt")
    with pytest.raises(CheckpointError, match="final.pt has no step in its name"):
        import_series(folder, TASK.to_dict(), tmp_path / "run")
    assert not (tmp_path / "run").exists()
