"""The `ipr` and `prune` analyses: through a `Subject`, save/load round trip, figures, a clear
error on models they do not support, and the CLI on a tiny trained quadratic-MLP run (the
MPSP run of tests/integration/test_analyses.py has no quadratic MLP).
"""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest
import torch

import models
from analyses import get_analysis, load_subject
from analyses.subject import Subject
from interp.cli import main
from interp.errors import ConfigError
from interp.training import TrainConfig, train
from tasks import ModAddTask, MPSPTask
from tests.builders import tiny_config

TASK = ModAddTask(p=11, xi=0.3)


def _quadratic(d_hidden: int = 16, seed: int = 0) -> models.QuadraticMLP:
    cfg = models.preset_config("quadratic-mlp", TASK, d_hidden=d_hidden)
    return models.build_model(cfg, seed=seed).eval()


@pytest.fixture(scope="module")
def subject() -> Subject:
    return Subject(model=_quadratic(), task=TASK, splits=TASK.splits(0), step=5, loss="mse")


@pytest.mark.parametrize("name", ["ipr", "prune"])
def test_compute_frame_figure_and_round_trip(name, subject, tmp_path):
    analysis = get_analysis(name)
    result = analysis.compute(subject, analysis.params())
    assert isinstance(result.figure(), go.Figure) and result.step == 5
    frame = result.to_frame()
    loaded = analysis.result.load(result.save(tmp_path))
    assert loaded.to_frame().equals(frame) and loaded.params == result.params
    assert (tmp_path / "figure.html").stat().st_size > 0


def test_ipr_values_match_the_library_on_the_number_tokens(subject):
    from interp.dissect.fourier import neuron_ipr

    result = get_analysis("ipr").compute(subject, get_analysis("ipr").params())
    m = subject.model
    expected = neuron_ipr([m.W_E_left[: TASK.p].detach(), m.W_E_right[: TASK.p].detach()])["joint"]
    torch.testing.assert_close(result.ipr, expected.float())
    assert result.n_values == TASK.p and result.ipr.shape == (16,)
    assert ((result.ipr > 0) & (result.ipr <= 1)).all()


def test_prune_orders_by_ipr_and_ends_at_class_zero(subject):
    prune, ipr = get_analysis("prune"), get_analysis("ipr")
    result = prune.compute(subject, prune.params(points=5))
    values = ipr.compute(subject, ipr.params()).ipr
    assert torch.all(values[result.neuron_order][1:] >= values[result.neuron_order][:-1])
    assert result.removed == [0, 4, 8, 12, 16]
    last, train = result.records[-1], subject.splits["train"]
    assert last["train/acc"] == pytest.approx((train.labels == 0).float().mean().item())
    assert last["train_true/acc"] == pytest.approx((train.extras["true_labels"] == 0).float().mean().item())
    descending = prune.compute(subject, prune.params(order="ipr_descending", points=2))
    assert descending.neuron_order != result.neuron_order
    with pytest.raises(ConfigError, match="did you mean"):
        prune.compute(subject, prune.params(order="ipr_desc"))


@pytest.mark.parametrize("name", ["ipr", "prune"])
def test_transformer_subject_is_a_clear_config_error(name):
    task = MPSPTask(vocab=12, n=4, n_train=16, n_val=8, n_adv=8)
    cfg = tiny_config(task, n_layers=1, n_heads=1, d_model=8, d_mlp=16)
    transformer = Subject(model=models.Transformer(cfg), task=task, splits=task.splits(0))
    with pytest.raises(ConfigError, match="quadratic MLP"):
        get_analysis(name).compute(transformer, get_analysis(name).params())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("quadratic") / "run"
    train(
        out,
        _quadratic(),
        TASK,
        TrainConfig(epochs=6, lr=1e-2, weight_decay=1.0, loss="mse", eval_every=3, checkpoint_log_points=3),
        progress=False,
    )
    return out


@pytest.mark.parametrize("name", ["ipr", "prune"])
def test_cli_equals_python_api_on_a_quadratic_run(name, run_dir, tmp_path, capsys):
    analysis = get_analysis(name)
    analysis.compute(load_subject(run_dir), analysis.params()).save(tmp_path / "api")
    with pytest.raises(SystemExit) as info:
        main([name, "--ckpt", str(run_dir), "--out", str(tmp_path / "cli")])
    assert info.value.code == 0, capsys.readouterr().err
    api, cli = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("api", "cli"))
    assert api == cli
    assert (tmp_path / "api" / "tensors.safetensors").read_bytes() == (
        tmp_path / "cli" / "tensors.safetensors"
    ).read_bytes()


def test_ipr_evolves_over_checkpoints(run_dir):
    from analyses.evolution import evolve

    evolution = evolve(run_dir, get_analysis("ipr"), get_analysis("ipr").params(), progress=False)
    frame = evolution.to_frame()
    assert set(frame["step"]) == set(evolution.steps) and len(frame) == 16 * len(evolution.steps)
    assert "test/acc" in frame
