"""Oracle under TransformerLens 4.x (`make test-tl4`; CI runs it): 4.x removed `HookedTransformer`,
and the model class it offers for the same purpose, a small model built from a config with no
hub download, is `TransformerBridge.boot_native(TransformerBridgeConfig(...))`. Every analysis
that runs on 3.x's `HookedTransformer` (tests/oracle/test_transformer_lens_subjects.py) runs on
such a bridge and gives the results it gives on our `Transformer` holding the same weights,
read through the bridge's own TransformerLens-named view (`tl_named_parameters`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformer_lens import TransformerBridge
from transformer_lens.config import TransformerBridgeConfig

from analyses import get_analysis
from analyses.subject import Subject
from models import TransformerConfig
from models.convert import from_transformer_lens_state_dict
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

SIZES = {"n_heads": 2, "d_model": 16, "d_head": 8, "d_mlp": 32, "act_fn": "relu"}


def _bridge(task, normalization_type: str | None) -> TransformerBridge:
    """A `boot_native` bridge for `task`, every parameter perturbed (so biases and LayerNorm count)."""
    cfg = TransformerBridgeConfig(
        n_layers=2 if task is MPSP else 1, n_ctx=task.n_ctx, d_vocab=task.d_vocab,
        d_vocab_out=task.d_vocab_out, normalization_type=normalization_type, seed=0, **SIZES,
    )  # fmt: skip
    bridge = TransformerBridge.boot_native(cfg)
    bridge.enable_compatibility_mode()  # TransformerLens 3.x's hook names (hook_z, hook_resid_pre, ...)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in bridge.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
        bridge(torch.zeros(1, task.n_ctx, dtype=torch.long))  # registers the bridge's own LayerNorm hooks
    return bridge.eval()


def _ours(bridge: TransformerBridge, task, normalization_type: str | None):
    """Our `Transformer` with the bridge's weights, as TransformerLens names them."""
    cfg = TransformerConfig(
        n_layers=bridge.cfg.n_layers, n_ctx=task.n_ctx, d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out,
        normalization_type=normalization_type, **SIZES,
    )  # fmt: skip
    state = {name: p.detach().clone() for name, p in bridge.tl_named_parameters()}
    return from_transformer_lens_state_dict(state, cfg).eval()


def _pairs() -> dict[str, tuple[Subject, Subject]]:
    """Per task: (a subject holding the bridge, one holding ours with its weights)."""
    out = {}
    for task, norm in ((MPSP, "LN"), (MODADD, None)):
        bridge = _bridge(task, norm)
        splits = task.splits(0)
        out[task.name] = tuple(
            Subject(model=model, task=task, splits=splits) for model in (bridge, _ours(bridge, task, norm))
        )
    return out


# Built at import, not in a fixture: a bridge registers hooks of its own on its LayerNorms when it
# is built and at its first forward, which the suite's leaked-hook check (tests/conftest.py) would take for the test's.
PAIRS = _pairs()


@pytest.fixture(scope="module")
def pairs():
    return PAIRS


def test_the_bridge_and_ours_compute_the_same_logits(pairs):
    for bridge, ours in pairs.values():
        tokens = bridge.split("train").tokens[:16]
        torch.testing.assert_close(bridge.model(tokens), ours.model(tokens), atol=1e-5, rtol=1e-5)


# What differs on a bridge, and why:
# - circuit needs a hook on each head's query/key/value input; 4.x's native attention has none
#   (`set_use_split_qkv_input` raises), so circuit refuses in one line.
# - grads and llc work on the model's own parameters, and a bridge's are not TransformerLens's:
#   `tok_embed._original_component.weight`, one [d_model, d_model] `q` weight per layer, ... So
#   grads groups them under those names, and llc's chains draw their noise in that layout: the same
#   sampler on the same function, but not the same draws as ours. Both run; what does not depend
#   on the parameterisation (the loss at the checkpoint) equals ours.
BRIDGE_OWN_PARAMETERS = ("grads", "llc", "llc-calibrate")
EQUAL = [n for n in (*ON_MPSP, *ON_MODADD) if n not in (*BRIDGE_OWN_PARAMETERS, "circuit")]


@pytest.mark.parametrize("name", EQUAL)
def test_an_analysis_of_a_transformer_bridge_equals_it_on_ours(name, pairs):
    assert_same_results(name, pairs, "TransformerBridge")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_a_transformer_bridge_lacks_is_refused_in_one_line(name, pairs):
    assert_refused_in_one_line(name, pairs["mpsp"][0], REFUSED[name])


def test_circuit_refuses_a_bridge_without_per_head_input_hooks_in_one_line(pairs):
    assert_refused_in_one_line("circuit", pairs["mpsp"][0], "query/key/value input")


@pytest.mark.parametrize("name", BRIDGE_OWN_PARAMETERS)
def test_gradient_and_sampling_analyses_run_on_the_bridges_own_parameters(name, pairs):
    analysis = get_analysis(name)
    theirs, ours = pairs["mpsp"]
    frame = analysis.compute(theirs, params_of(analysis)).to_frame()
    numbers = frame.select_dtypes("number").to_numpy(dtype=float)
    assert len(frame) > 0 and np.isfinite(numbers[~np.isnan(numbers)]).all()
    if name == "grads":  # grouped by the bridge's own module names
        assert any("_original_component" in str(block) for block in frame["block"])
    if name == "llc":  # the loss at the checkpoint does not depend on the parameterisation
        on_ours = analysis.compute(ours, params_of(analysis))
        on_theirs = analysis.compute(theirs, params_of(analysis))
        assert on_theirs.init_loss == pytest.approx(on_ours.init_loss, rel=1e-5)
