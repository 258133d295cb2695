"""Linear probes (`interp.dissect.probes`, `analyses.probe`) on hand-built models whose linear
features are known: token parity written along one embedding direction, or no parity at all.
"""

from __future__ import annotations

import pytest
import torch

from analyses.probe import ANALYSIS, Params, ProbeResult, compute
from analyses.subject import Subject
from interp.cli import main
from interp.dissect.probes import embedding_probe, probe_indices, site_features
from interp.errors import ConfigError
from models import Transformer
from tasks import MPSPTask
from tests.builders import tiny_config

V = 32
TASK = MPSPTask(vocab=V, n=4, n_train=512, n_val=64, n_adv=64, shortcut="first")


def _model(parity: bool, d_model: int, noise_dims: int, seed: int = 0) -> Transformer:
    """One layer, one head. ``W_E[v]``: noise in dims 1..noise_dims and, if `parity`, +1 / -1 in
    dim 0 for odd / even v (the only direction that carries parity across tokens).
    """
    model = Transformer(tiny_config(TASK, n_layers=1, n_heads=1, d_model=d_model), seed=seed).eval()
    gen = torch.Generator().manual_seed(seed + 10)
    with torch.no_grad():
        model.W_E.zero_()
        model.W_E[:, 1 : 1 + noise_dims] = 0.5 * torch.randn(V + 1, noise_dims, generator=gen)
        if parity:
            model.W_E[:V, 0] = torch.where(torch.arange(V) % 2 == 1, 1.0, -1.0)
    return model


def _subject(model: Transformer) -> Subject:
    return Subject(model, TASK, TASK.splits(0), step=3)


def test_site_features_are_the_hooked_activations_computed_by_hand():
    model = _model(parity=True, d_model=16, noise_dims=7)
    tokens = TASK.splits(0)["val"].tokens
    indices = probe_indices(model, "resid_pre", tokens.shape[1], [1, 3])
    assert indices == [(0, 1), (0, 3)]
    for (_, pos), features in zip(indices, site_features(model, tokens, "resid_pre", indices, chunk=20)):
        expected = model.W_E[tokens[:, pos]] + model.W_pos[pos]
        torch.testing.assert_close(features, expected.double())


def test_probe_finds_the_planted_parity_direction_at_its_position_only():
    result = compute(
        _subject(_model(parity=True, d_model=16, noise_dims=7)), Params(token_pos=1, sites="resid_pre")
    )
    frame = result.to_frame().set_index(["probe", "pos"])
    assert frame.loc[("resid_pre", 1), "accuracy"] == 1.0
    for pos in (0, 2, 3):  # other tokens are independent of token 1: chance
        assert frame.loc[("resid_pre", pos), "accuracy"] < 0.65
    at_pos1 = result.indices.index([0, 1])
    direction = result.directions[at_pos1, 0, : result.dims[at_pos1]]
    assert direction[0].abs() > 0.9 and direction.norm() == pytest.approx(1.0)  # along e0


def test_embedding_probe_recovers_parity_on_held_out_values_and_the_shuffled_baseline_does_not():
    model = _model(parity=True, d_model=64, noise_dims=40)
    result = compute(_subject(model), Params(sites="resid_pre", positions="0", shuffles=20))
    assert result.embed_accuracy == 1.0 and result.embed_train_accuracy == 1.0
    assert abs(float(result.embed_shuffled.mean()) - 0.5) < 0.15
    assert result.embed_direction[0].abs() > 0.9
    assert result.embed_initial_accuracy is None  # a subject built in memory has no initial checkpoint


def test_without_a_parity_direction_training_accuracy_is_perfect_but_held_out_is_chance():
    # 32 rows in 64 dimensions: any labelling is separable, so training accuracy is 1 and says nothing.
    rows = _model(parity=False, d_model=64, noise_dims=63).W_E.detach()[:V]
    fit = embedding_probe(rows, torch.arange(V) % 2, folds=8)
    assert fit.train_accuracy == 1.0
    assert fit.accuracy < 0.75


def test_save_load_round_trip_and_figure(tmp_path):
    result = compute(
        _subject(_model(parity=True, d_model=16, noise_dims=7)),
        Params(sites="resid_pre,z_pos", positions="0,-1"),
    )
    assert ANALYSIS.name == ProbeResult.analysis == "probe"
    assert set(result.probe_site) == {"resid_pre", "z_pos"} and result.axes["z_pos"] == [
        "layer",
        "pos",
        "head",
    ]
    assert {tuple(i) for i in result.indices} == {(0, 0), (0, 4), (0, 0, 0), (0, 4, 0)}
    loaded = ProbeResult.load(result.save(tmp_path / "probe"))
    assert loaded.to_frame().equals(result.to_frame())
    torch.testing.assert_close(loaded.directions, result.directions, equal_nan=True)
    assert "token-parity" in result.figure().layout.title.text


def test_bad_target_position_and_constant_target_are_config_errors():
    subject = _subject(_model(parity=True, d_model=16, noise_dims=7))
    with pytest.raises(ConfigError, match="did you mean 'token-parity'"):
        compute(subject, Params(target="token-parit"))
    with pytest.raises(ConfigError, match="positions"):
        compute(subject, Params(positions="9"))
    with pytest.raises(ConfigError, match="single value"):  # the readout token is always SEP
        compute(subject, Params(token_pos=-1))


def test_cli_bad_target_exits_2(tmp_path, capsys):
    from interp.training import TrainConfig, train

    model = Transformer(tiny_config(TASK, n_layers=1, n_heads=1), seed=0)
    train(tmp_path / "run", model, TASK, TrainConfig(epochs=2, eval_every=1), progress=False)
    with pytest.raises(SystemExit) as info:
        main(["probe", "--ckpt", str(tmp_path / "run"), "--target", "parity"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "'parity'" in err and "token-parity" in err and "Traceback" not in err
