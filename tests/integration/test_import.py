"""`interp import`: TransformerLens-convention checkpoints built with TransformerLens 3.9 become run
folders whose model computes what the TransformerLens model computes; files that need pickled
code are refused with exit 2, never unpickled.
"""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from analyses import get_analysis, load_subject
from interp.cli import main
from interp.store import list_checkpoints, read_config
from models.convert import to_transformer_lens
from tasks import ModAddTask

P = 11
TASK = ModAddTask(p=P, train_frac=0.6)


def _tl_model(seed: int = 0, **overrides) -> HookedTransformer:
    cfg = HookedTransformerConfig(
        **{
            "n_layers": 1,
            "d_model": 16,
            "n_heads": 2,
            "d_head": 8,
            "d_mlp": 32,
            "n_ctx": 3,
            "d_vocab": P + 1,
            "d_vocab_out": P,
            "act_fn": "relu",
            "normalization_type": None,
            **overrides,
        }
    )
    torch.manual_seed(seed)
    model = HookedTransformer(cfg)
    with torch.no_grad():  # non-zero biases, so they are imported too
        for name, p in model.named_parameters():
            if not name.split(".")[-1].startswith("W_"):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _grid() -> torch.Tensor:
    x, y = torch.arange(P).repeat_interleave(P), torch.arange(P).repeat(P)
    return torch.stack([x, y, torch.full_like(x, P)], 1)


def _assert_same_function(run_dir, tl_model):
    subject = load_subject(run_dir)
    with torch.no_grad():
        torch.testing.assert_close(subject.model(_grid()), tl_model(_grid()), atol=1e-5, rtol=0)
    return subject


def test_a_torch_file_with_state_dict_and_config_dict_round_trips(tmp_path, capsys):
    tl_model = _tl_model()
    path = tmp_path / "grokking.pth"
    torch.save(
        {"state_dict": tl_model.state_dict(), "config": tl_model.cfg.to_dict()}, path
    )  # numpy scalars inside
    code, out, err = _cli(
        capsys,
        "import",
        str(path),
        "--task",
        "modadd",
        "--p",
        str(P),
        "--train-frac",
        "0.6",
        "--step",
        "300",
        "--out",
        str(tmp_path / "run"),
    )
    assert code == 0, err
    assert "imported" in out
    subject = _assert_same_function(tmp_path / "run", tl_model)
    assert subject.step == 300 and list_checkpoints(tmp_path / "run") == [300]
    config = read_config(tmp_path / "run")
    assert config["task"] == TASK.to_dict() and config["imported"]["format"] == "transformer_lens"
    assert len(config["imported"]["sha256"]) == 64
    # ...and back: the imported weights are the TransformerLens model's, tensor for tensor.
    back = to_transformer_lens(subject.model)
    for key, value in tl_model.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    progress = get_analysis("progress")
    assert progress.compute(subject, progress.params()).loss.isfinite().all()


def test_safetensors_beside_a_config_json(tmp_path, capsys):
    tl_model = _tl_model(seed=1, normalization_type="LN", n_layers=2)
    folder = tmp_path / "published"
    folder.mkdir()
    state = {k: v.contiguous() for k, v in tl_model.state_dict().items()}
    safetensors.torch.save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text(
        json.dumps(tl_model.cfg.to_dict(), default=str)
    )  # dtype as "torch.float32"
    args = ["import", folder / "model.safetensors", "--task", "modadd", "--p", P, "--train-frac", "0.6"]
    args += ["--out", tmp_path / "run"]
    code, _, err = _cli(capsys, *map(str, args))
    assert code == 0, err
    _assert_same_function(tmp_path / "run", tl_model)
    code, _, err = _cli(capsys, *map(str, args))
    assert code == 0, "importing again into the same folder is idempotent"


@pytest.mark.parametrize("payload", ["config_object", "whole_model"])
def test_files_that_need_pickled_code_are_refused(tmp_path, capsys, payload):
    tl_model = _tl_model()
    data = (
        {"state_dict": tl_model.state_dict(), "config": tl_model.cfg}
        if payload == "config_object"
        else tl_model
    )
    path = tmp_path / "unsafe.pt"
    torch.save(data, path)
    code, _, err = _cli(
        capsys, "import", str(path), "--task", "modadd", "--p", str(P), "--out", str(tmp_path / "run")
    )
    assert code == 2 and "Traceback" not in err
    assert "needs pickled code" in err and "transformer_lens" in err and "re-save it as plain data" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task", "modadd", "--p", "13"], "d_vocab=12"),
        (["--task", "modad", "--p", str(P)], "did you mean 'modadd'"),
    ],
)
def test_a_task_the_model_does_not_fit_exits_2(tmp_path, capsys, args, message):
    tl_model = _tl_model()
    path = tmp_path / "model.pt"
    torch.save({"model": tl_model.state_dict(), "cfg": tl_model.cfg.to_dict()}, path)
    code, _, err = _cli(capsys, "import", str(path), *args, "--out", str(tmp_path / "run"))
    assert code == 2 and message in err and "Traceback" not in err


def test_unsupported_transformer_lens_settings_and_missing_files_exit_2(tmp_path, capsys):
    tl_model = _tl_model(seed=2, normalization_type="LN")
    tl_model.process_weights_(fold_ln=True)  # LayerNorm folded: LNPre, which our model does not implement
    path = tmp_path / "folded.pt"
    torch.save({"state_dict": tl_model.state_dict(), "config": tl_model.cfg.to_dict()}, path)
    code, _, err = _cli(
        capsys, "import", str(path), "--task", "modadd", "--p", str(P), "--out", str(tmp_path / "a")
    )
    assert code == 2 and "LNPre" in err
    code, _, err = _cli(
        capsys, "import", str(tmp_path / "nope.pt"), "--task", "modadd", "--out", str(tmp_path / "b")
    )
    assert code == 2 and "nope.pt" in err
