"""Every registered analysis, end to end on a tiny trained run: the CLI and the Python API
give identical saved results, results round-trip through save/load, and bad input exits 2."""

from __future__ import annotations

import dataclasses
import json

import pytest
import safetensors.torch
import torch

from analyses import REGISTRY, get_analysis, load_subject
from interp.cli import main
from interp.training import TrainConfig, train
from models import build_model, preset_config
from tasks import ModAddTask, MPSPTask

# One tiny trained run per model kind; every analysis runs on the kinds it declares.
RUNS = {
    "transformer": (MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75), "mpsp-2l2h", {}),
    "quadratic_mlp": (ModAddTask(p=11, train_frac=0.6, xi=0.2), "quadratic-mlp", {"loss": "mse", "lr": 1e-2}),
}
CASES = [(name, kind) for name in REGISTRY for kind in get_analysis(name).models]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folders = {}
    for kind, (task, preset, options) in RUNS.items():
        model = build_model(preset_config(preset, task), seed=0)
        out = tmp_path_factory.mktemp("analyses") / kind
        train(out, model, task, TrainConfig(epochs=20, eval_every=10, seed=0, **options), progress=False)
        folders[kind] = out
    return folders


@pytest.fixture(scope="module")
def run_dir(runs):
    return runs["transformer"]


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def _saved(folder):
    data = json.loads((folder / "result.json").read_text())
    tensors = safetensors.torch.load((folder / "tensors.safetensors").read_bytes())
    return data, tensors


@pytest.mark.parametrize("name", list(REGISTRY))
def test_registry_entry_matches_its_module(name):
    analysis = get_analysis(name)
    assert (analysis.name, analysis.summary) == (name, REGISTRY[name][1])
    assert analysis.result.analysis == name
    assert analysis.models and set(analysis.models) <= set(RUNS), "declare the model kinds it applies to"
    assert dataclasses.is_dataclass(analysis.params) and analysis.params.__dataclass_params__.frozen
    assert all(f.metadata.get("help") for f in dataclasses.fields(analysis.params)), "every param needs a help text"


@pytest.mark.parametrize("name, kind", CASES)
def test_cli_and_python_api_give_identical_results(name, kind, runs, tmp_path, capsys):
    run_dir = runs[kind]
    analysis = get_analysis(name)
    result = analysis.compute(load_subject(run_dir), analysis.params())
    result.save(tmp_path / "api")
    code, out, err = _cli(capsys, name, "--ckpt", str(run_dir), "--out", str(tmp_path / "cli"))
    assert code == 0, err
    assert "saved to" in out
    (api_json, api_tensors), (cli_json, cli_tensors) = _saved(tmp_path / "api"), _saved(tmp_path / "cli")
    assert api_json == cli_json
    assert api_tensors.keys() == cli_tensors.keys()
    for key in api_tensors:
        torch.testing.assert_close(api_tensors[key], cli_tensors[key], rtol=0, atol=0, equal_nan=True, msg=key)
    assert (tmp_path / "cli" / "figure.html").stat().st_size > 0
    loaded = analysis.result.load(tmp_path / "api")
    assert loaded.to_frame().equals(result.to_frame())


@pytest.mark.parametrize("name", list(REGISTRY))
def test_bad_checkpoint_exits_2(name, tmp_path, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(tmp_path / "nope"))
    assert code == 2 and "nope" in err and "Traceback" not in err


@pytest.mark.parametrize("name", [n for n in REGISTRY if "split" in {f.name for f in dataclasses.fields(get_analysis(n).params)}
                                  and "transformer" in get_analysis(n).models])
def test_bad_split_exits_2_with_did_you_mean(name, run_dir, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(run_dir), "--split", "adb")
    assert code == 2 and "did you mean 'adv'" in err


@pytest.mark.parametrize("name", [n for n in REGISTRY if "transformer" not in get_analysis(n).models])
def test_analysis_on_a_model_it_does_not_apply_to_exits_2(name, run_dir, capsys):
    code, _, err = _cli(capsys, name, "--ckpt", str(run_dir))
    assert code == 2 and "Traceback" not in err


def test_default_result_folder_is_inside_the_run(run_dir, capsys):
    name = next(iter(REGISTRY))
    code, out, err = _cli(capsys, name, "--ckpt", str(run_dir))
    assert code == 0, err
    assert (run_dir / "analyses" / name / "step_000020" / "result.json").exists()
