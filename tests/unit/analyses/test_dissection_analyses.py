"""The ``patch`` and ``ablate`` analyses through a `Subject`: compute, frame, figure, save/load."""

from __future__ import annotations

import dataclasses

import pandas as pd
import plotly.graph_objects as go
import pytest
import torch

import models
import tasks
from analyses import ablate, patch
from analyses.base import Analysis
from analyses.subject import Subject
from interp.errors import ConfigError
from tests.builders import tiny_config

TASK = tasks.MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)


@pytest.fixture(scope="module")
def subject() -> Subject:
    cfg = tiny_config(TASK)
    return Subject(model=models.Transformer(cfg).eval(), task=TASK, splits=TASK.splits(0), step=7)


@pytest.mark.parametrize("module", [patch, ablate])
def test_registry_entries(module):
    entry = module.ANALYSIS
    assert isinstance(entry, Analysis) and entry.result.analysis == entry.name
    for field in dataclasses.fields(entry.params):
        assert field.metadata["help"] and field.type in ("str", "int", "float", "bool")


def _assert_equal_results(a, b):
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, torch.Tensor):  # exact, NaN where NaN (p-values without permutations)
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=field.name)
        else:
            assert x == y, field.name


@pytest.mark.parametrize("source", ["counterfactual", "val"])
def test_patch_computes_saves_and_loads(subject, tmp_path, source):
    params = patch.Params(source=source, sites="resid_pre,z,z_pos,pattern", max_examples=20)
    result = patch.compute(subject, params)
    assert result.step == 7 and result.params["source"] == source and result.n_pairs == 20
    assert result.site("resid_pre")["recovery"].shape == (2, TASK.n_ctx)
    assert result.site("z_pos")["accuracy"].shape == (2, TASK.n_ctx, 2)
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 2 * TASK.n_ctx + 4 + 4 * TASK.n_ctx + 4
    top = frame["recovery"].abs().fillna(-1)
    assert top.iloc[0] == top.max()
    assert isinstance(result.figure(), go.Figure)
    loaded = patch.PatchResult.load(result.save(tmp_path / "patch"))
    _assert_equal_results(result, loaded)


def test_ablate_computes_saves_and_loads(subject, tmp_path):
    result = ablate.compute(subject, ablate.Params(splits="val,adv"))
    assert result.accuracy.shape == (2, 2, 6) and result.splits == ["val", "adv"]
    frame = result.to_frame()
    assert len(frame) == 24 and frame["delta_acc"].abs().iloc[0] == frame["delta_acc"].abs().max()
    assert isinstance(result.figure(), go.Figure)
    loaded = ablate.AblateResult.load(result.save(tmp_path / "ablate"))
    _assert_equal_results(result, loaded)
    assert ablate.compute(subject, ablate.Params(splits="all", kinds="zero", max_examples=8)).splits == list(
        subject.splits
    )


@pytest.mark.parametrize(
    ("module", "params", "match"),
    [
        (patch, patch.Params(split="adb"), "adv"),
        (patch, patch.Params(source="vall"), "val"),
        (patch, patch.Params(sites="resid_pre,zz"), "z"),
        (ablate, ablate.Params(splits="train,vla"), "val"),
        (ablate, ablate.Params(kinds="zeros"), "zero"),
        (ablate, ablate.Params(loss="ce"), "cross_entropy"),
    ],
)
def test_bad_params_are_config_errors_with_hints(subject, module, params, match):
    with pytest.raises(ConfigError, match=match):
        module.compute(subject, params)
