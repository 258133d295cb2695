"""Oracle: every registered analysis that applies to a transformer, run on TransformerLens 3.x's own
`HookedTransformer` (built from `HookedTransformerConfig`, as a user builds and trains one) gives
the results it gives on our `Transformer` holding the same weights (`from_transformer_lens`).
An attention-only `HookedTransformer` (no MLP, so no `hook_mlp_out` / `hook_resid_mid`) is a
subject too, its components heads only; what needs something the model lacks refuses in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from analyses import REGISTRY, get_analysis
from analyses.subject import Subject
from interp.errors import ConfigError
from models.convert import from_transformer_lens
from tests.tl_subjects import (
    MODADD,
    MPSP,
    ON_MODADD,
    ON_MPSP,
    REFUSED,
    assert_refused_in_one_line,
    assert_same_results,
    params_of,
)


def test_every_registered_analysis_is_either_run_or_refused_here():
    assert set(ON_MPSP) | set(ON_MODADD) | set(REFUSED) == set(REGISTRY)


def _tl_model(task, *, attn_only: bool = False, normalization_type: str | None = "LN") -> HookedTransformer:
    """A `HookedTransformer` for `task` with non-zero biases and LayerNorm weights (so they count)."""
    cfg = HookedTransformerConfig(
        n_layers=2 if task is MPSP else 1, n_heads=2, d_model=16, d_head=8, d_mlp=None if attn_only else 32,
        n_ctx=task.n_ctx, d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out, act_fn="relu",
        normalization_type=normalization_type, attn_only=attn_only, default_prepend_bos=False, seed=0,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.split(".")[-1].startswith("W_"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        model.W_U.mul_(3.0)
    return model.eval()


@pytest.fixture(scope="module")
def pairs():
    """Per task: (a subject holding the TransformerLens model, one holding ours with its weights)."""
    out = {}
    for task, norm in ((MPSP, "LN"), (MODADD, None)):
        tl_model = _tl_model(task, normalization_type=norm)
        splits = task.splits(0)
        out[task.name] = tuple(
            Subject(model=model, task=task, splits=splits)
            for model in (tl_model, from_transformer_lens(tl_model))
        )
    return out


@pytest.mark.parametrize("name", [*ON_MPSP, *ON_MODADD])
def test_an_analysis_of_a_transformer_lens_model_equals_it_on_ours(name, pairs):
    assert_same_results(name, pairs, "HookedTransformer")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_a_transformer_lens_model_lacks_is_refused_in_one_line(name, pairs):
    assert_refused_in_one_line(name, pairs["mpsp"][0], REFUSED[name])


@pytest.fixture(scope="module")
def attention_only():
    return Subject(model=_tl_model(MPSP, attn_only=True), task=MPSP, splits=MPSP.splits(0))


@pytest.mark.parametrize("name", [n for n in ON_MPSP if n != "circuit"])
def test_an_attention_only_transformer_lens_model_is_a_subject(name, attention_only, pairs):
    analysis = get_analysis(name)
    frame = analysis.compute(attention_only, params_of(analysis)).to_frame()
    assert len(frame) > 0
    numbers = frame.select_dtypes("number").to_numpy(dtype=float)
    assert np.isfinite(numbers[~np.isnan(numbers)]).all()
    text = " ".join(map(str, frame.to_numpy().ravel()))
    assert "MLP" not in text and "mlp_out" not in text and "W_in" not in text  # heads only
    if name in ("dla", "ablate"):  # every head listed, as for the model with MLPs
        full = analysis.compute(pairs["mpsp"][0], params_of(analysis)).to_frame()
        column = "component"
        heads = sorted({c for c in full[column] if "H" in str(c) and "MLP" not in str(c)})
        assert heads == sorted({c for c in frame[column] if "H" in str(c)})


def test_circuit_refuses_an_attention_only_model_in_one_line(attention_only):
    analysis = get_analysis("circuit")
    with pytest.raises(ConfigError, match="circuit needs a model with MLP blocks") as info:
        analysis.compute(attention_only, analysis.params())
    assert "\n" not in str(info.value)


def test_dla_of_an_attention_only_model_adds_up_to_its_logit_difference(attention_only):
    # An independent check on the model without MLPs: at the readout, the direct terms of every
    # component (embeddings, heads, biases) sum to the contrast logit difference the model computes.
    frame = get_analysis("dla").compute(attention_only, get_analysis("dla").params()).to_frame()
    for (split, group), rows in frame.groupby(["split", "group"]):
        assert rows["attribution"].sum() == pytest.approx(rows["logit_diff"].iloc[0], abs=1e-4), (
            split,
            group,
        )
        assert not any("MLP" in c for c in rows["component"])
