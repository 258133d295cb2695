"""Oracle: direct logit attribution (`interp.dissect.logit_attribution`).

* Against TransformerLens 3.9: the same weights in a `HookedTransformer` with the final
  LayerNorm folded into `W_U` and `b_U` (by hand: the same function), decomposed with
  `get_full_resid_decomposition` and attributed with `logit_attrs`, must give each component's
  term (1e-5); the folded `b_U`'s contrast is our ``unembed_bias``. With more than two classes
  the contrast is the mean of `logit_attrs` against each other class.
* The terms sum to the model's own label-contrast logit difference (1e-5).
"""

from __future__ import annotations

import pytest
import torch

import tasks
from interp.dissect.logit_attribution import contrast_logits, direct_logit_attribution
from models.convert import to_transformer_lens
from tests.oracle.oracle_models import random_transformer  # tests/oracle/oracle_models.py

ATOL = 1e-5
BINARY = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=32, n_adv=32)
TERNARY = tasks.MPSPTask(label="sum-mod3", vocab=12, n=4, n_train=64, n_val=32, n_adv=32)


def _tl_names(names: list[str]) -> list[str]:
    """TransformerLens's component labels in our names (``0_mlp_out`` -> ``L0MLP``)."""
    return [f"L{n.split('_')[0]}MLP" if n.endswith("_mlp_out") else n for n in names]


def _fold_final_layer_norm(tl_model) -> None:
    """Fold `ln_final`'s weight and bias into `W_U` and `b_U` (the same function; TransformerLens's
    `process_weights_` would also fold the value biases into `b_O`, moving them out of the heads).
    """
    if tl_model.cfg.normalization_type != "LN":
        return
    with torch.no_grad():
        w, b = tl_model.ln_final.w.clone(), tl_model.ln_final.b.clone()
        tl_model.unembed.b_U.add_(b @ tl_model.unembed.W_U)
        tl_model.unembed.W_U.mul_(w[:, None])
        tl_model.ln_final.w.fill_(1.0)
        tl_model.ln_final.b.zero_()


def _transformer_lens_terms(model, tokens, labels, neurons: bool) -> dict[str, torch.Tensor]:
    tl_model = to_transformer_lens(model).eval()
    _fold_final_layer_norm(tl_model)
    n = model.cfg.d_vocab_out
    with torch.no_grad():
        _, cache = tl_model.run_with_cache(tokens)
        stack, names = cache.get_full_resid_decomposition(
            expand_neurons=neurons, pos_slice=-1, return_labels=True
        )
        attrs = torch.stack(
            [cache.logit_attrs(stack, labels, (labels + k) % n, pos_slice=-1) for k in range(1, n)]
        ).mean(0)
        b_u = torch.stack([tl_model.b_U[labels] - tl_model.b_U[(labels + k) % n] for k in range(1, n)]).mean(
            0
        )
    return {**dict(zip(_tl_names(names), attrs)), "unembed_bias": b_u}


@pytest.mark.parametrize("task", [BINARY, TERNARY], ids=["2-classes", "3-classes"])
@pytest.mark.parametrize("neurons", [False, True], ids=["mlps", "neurons"])
@pytest.mark.parametrize("norm", ["LN", None])
def test_terms_equal_transformer_lens_logit_attrs_on_the_folded_model(task, neurons, norm):
    model = random_transformer(task, seed=3, normalization_type=norm)
    split = task.splits(0)["adv"]
    ours = direct_logit_attribution(model, split.tokens, split.labels, neurons=neurons, chunk=11)
    theirs = _transformer_lens_terms(model, split.tokens, split.labels, neurons)
    assert set(ours.components) == set(theirs)
    for i, name in enumerate(ours.components):
        torch.testing.assert_close(ours.per_example[i], theirs[name], atol=ATOL, rtol=0, msg=name)


@pytest.mark.parametrize("task", [BINARY, TERNARY], ids=["2-classes", "3-classes"])
@pytest.mark.parametrize("neurons", [False, True], ids=["mlps", "neurons"])
def test_terms_sum_to_the_models_logit_difference(task, neurons):
    model = random_transformer(task, seed=1)
    split = task.splits(0)["val"]
    result = direct_logit_attribution(model, split.tokens, split.labels, neurons=neurons)
    want = contrast_logits(model(split.tokens)[:, -1], split.labels)
    torch.testing.assert_close(result.logit_diff, want, atol=ATOL, rtol=0)
    torch.testing.assert_close(result.per_example.sum(0), want, atol=ATOL, rtol=0)
    assert result.per_example.shape == (len(result.components), len(split))


def test_a_head_whose_output_weights_are_zero_contributes_nothing():
    model = random_transformer(BINARY, seed=2)
    with torch.no_grad():
        model.blocks[1].attn.W_O[0].zero_()
    split = BINARY.splits(0)["adv"]
    result = direct_logit_attribution(model, split.tokens, split.labels)
    assert (result.per_example[result.components.index("L1H0")] == 0).all()
    assert result.per_example[result.components.index("L1H1")].abs().max() > 0
