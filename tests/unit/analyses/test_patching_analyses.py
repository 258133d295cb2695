"""The ``attribute`` and ``path-patch`` analyses through a `Subject`: compute, frame, figure,
save/load, statistics, and bad parameters.
"""

from __future__ import annotations

import dataclasses

import plotly.graph_objects as go
import pytest
import torch

import models
import tasks
from analyses import attribute, patch, path_patch
from analyses.subject import Subject
from interp.dissect.patching import SITES
from interp.errors import ConfigError
from tests.builders import tiny_config

TASK = tasks.MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)


@pytest.fixture(scope="module")
def subject() -> Subject:
    cfg = tiny_config(TASK)
    return Subject(model=models.Transformer(cfg, seed=3).eval(), task=TASK, splits=TASK.splits(0), step=11)


def _assert_equal_results(a, b):
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True, msg=field.name)
        else:
            assert x == y, field.name


def test_attribute_covers_every_site_and_compares_with_activation_patching(subject, tmp_path):
    result = attribute.compute(subject, attribute.Params(compare=True, max_examples=24, n_boot=100))
    assert result.sites == list(SITES)
    assert set(result.correlation) == {*result.sites, "all"}
    assert all(r is None or -1 <= r <= 1 for r in result.correlation.values())
    actual = patch.compute(subject, patch.Params(sites=",".join(result.sites), max_examples=24, n_boot=10))
    torch.testing.assert_close(result.patched_logit_diff, actual.logit_diff, atol=1e-6, rtol=0)
    frame = result.to_frame()
    assert {"patched_logit_diff", "recovery_low", "p_value"} <= set(frame.columns)
    assert len(frame) == len(result.logit_diff)
    assert "Pearson r" in result.figure().layout.title.text
    _assert_equal_results(result, attribute.AttributeResult.load(result.save(tmp_path / "attribute")))


def test_attribute_without_compare_leaves_the_comparison_empty(subject):
    result = attribute.compute(subject, attribute.Params(sites="resid_pre,z", max_examples=16, n_boot=50))
    assert result.sites == ["resid_pre", "z"] and not result.correlation
    assert result.patched_logit_diff.isnan().all()


def test_path_patch_result_round_trips_and_has_a_row_per_path(subject, tmp_path):
    params = path_patch.Params(source="val", max_examples=20, n_boot=50, permutations=4)
    result = path_patch.compute(subject, params)
    assert result.senders == ["L0H0", "L0H1", "L1H0", "L1H1"] and result.receivers[-1] == "logits"
    assert result.logit_diff.shape == (4, len(result.receivers)) and result.per_example.shape[-1] == 20
    frame = result.to_frame()
    assert len(frame) == 2 * 2 * 3 + 4  # layer-0 heads into 2 heads x q, k, v; every head into the logits
    assert frame["p_value"].between(0.2 - 1e-6, 1).all(), "4 permutations: p >= 1/5"
    assert isinstance(result.figure(), go.Figure)
    _assert_equal_results(result, path_patch.PathPatchResult.load(result.save(tmp_path / "path")))


@pytest.mark.parametrize(
    ("module", "params", "match"),
    [
        (attribute, attribute.Params(sites="resid,z"), "resid_pre"),
        (attribute, attribute.Params(split="val", source="adb"), "adv"),
        (attribute, attribute.Params(permutations=-1), "permutations"),
        (path_patch, path_patch.Params(receivers="q,logit"), "logits"),
        (path_patch, path_patch.Params(ci=2.0), "ci"),
    ],
)
def test_bad_params_are_config_errors_with_hints(subject, module, params, match):
    with pytest.raises(ConfigError, match=match):
        module.compute(subject, params)


def test_dla_rows_are_splits_and_groups_and_terms_sum_to_the_logit_difference(subject, tmp_path):
    from analyses import dla

    result = dla.compute(subject, dla.Params(splits="val,adv", max_examples=20))
    assert result.rows == ["val", "val/consistent", "adv", "adv/opposing"]
    assert result.components[:2] == ["embed", "pos_embed"] and result.components[-2:] == [
        "bias",
        "unembed_bias",
    ]
    torch.testing.assert_close(result.attribution.sum(1), result.logit_diff, atol=1e-5, rtol=0)
    neurons = dla.compute(subject, dla.Params(splits="adv", neurons=True))
    assert "L1N31" in neurons.components and neurons.attribution.shape == (2, 2 + 2 * (2 + 32) + 2)
    torch.testing.assert_close(neurons.attribution.sum(1), neurons.logit_diff, atol=1e-5, rtol=0)
    frame = result.to_frame()
    assert len(frame) == 4 * len(result.components) and {"split", "group", "sem"} <= set(frame.columns)
    assert isinstance(result.figure(), go.Figure)
    _assert_equal_results(result, dla.DLAResult.load(result.save(tmp_path / "dla")))
    with pytest.raises(ConfigError, match="adv"):
        dla.compute(subject, dla.Params(splits="adb"))


@pytest.mark.parametrize("module", [attribute, path_patch])
def test_the_callers_hooks_survive_an_analysis_whose_hook_raises(subject, monkeypatch, module):
    from interp.dissect import hooks

    calls: list[int] = []
    model = subject.model
    model.add_hook("blocks.0.hook_resid_pre", lambda act, hook: calls.append(1))
    try:

        def failing_recorder(name, store, keep_graph=False):
            def hook(act, hook):
                raise RuntimeError(f"injected failure at {name}")

            return hook

        monkeypatch.setattr(hooks, "_saving", failing_recorder)
        with pytest.raises(RuntimeError, match="injected failure"):
            module.compute(subject, module.Params(max_examples=8, n_boot=10))
        monkeypatch.undo()
        assert sum(len(hp.fwd_hooks) for hp in model.hook_dict.values()) == 1, (
            "only the caller's hook is left"
        )
        before = len(calls)
        module.compute(subject, module.Params(max_examples=8, n_boot=10))
        assert len(calls) > before, "and it keeps firing in later analyses"
    finally:
        model.reset_hooks()


@pytest.mark.parametrize("analysis", ["patch", "path-patch"])
def test_recovery_is_undefined_below_the_gap_threshold_in_table_and_figure(analysis):
    """A model that barely tells clean from corrupted inputs apart (an init scaled down so all
    logits are ~1e-4) has a gap far below MIN_RECOVERY_GAP: its recoveries, noise divided by
    noise, are not shown; the same site on a model with a real gap is.
    """
    from analyses.effects import MIN_RECOVERY_GAP

    module = {"patch": patch, "path-patch": path_patch}[analysis]
    params = module.Params(source="val", max_examples=24, n_boot=20)
    flat = Subject(
        model=models.Transformer(tiny_config(TASK, init_range=1e-4), seed=3).eval(),
        task=TASK,
        splits=TASK.splits(0),
    )
    result = module.compute(flat, params)
    assert abs(result.gap) < MIN_RECOVERY_GAP and not result.recovery_defined
    assert result.recovery.isfinite().any()  # the raw ratio exists, and is meaningless
    frame = result.to_frame()
    assert frame["recovery"].isna().all() and not frame["recovery_defined"].any()
    assert frame["logit_diff"].notna().any()  # the logit differences are still reported
    assert result.table().splitlines()[0].startswith("recovery undefined: |LD_source - LD_target| = ")
    figure = result.figure()
    assert any("recovery undefined" in a.text for a in figure.layout.annotations)
    shown = [v for trace in figure.data if isinstance(trace, go.Heatmap) for row in trace.z for v in row]
    assert shown and all(v is None or v != v for v in shown)  # blank cells: NaN
    real = module.compute(
        Subject(model=models.Transformer(tiny_config(TASK), seed=3).eval(), task=TASK, splits=TASK.splits(0)),
        params,
    )
    if abs(real.gap) >= MIN_RECOVERY_GAP:
        assert real.to_frame()["recovery"].notna().any() and "undefined" not in real.table()
