"""Named parts of a model's weights (`restrict`): their form without torch, their masks on a model."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from interp.dissect.weight_parts import parse_restrict, restrict_masks
from interp.errors import ConfigError
from models import build_model, preset_config
from tasks import MPSPTask

TASK = MPSPTask(vocab=12, n=4, n_train=64, n_val=16, n_adv=16, r=0.75)


@pytest.fixture(scope="module")
def model():
    return build_model(preset_config("mpsp-2l2h", TASK), seed=0)


def test_parsing_imports_no_torch():
    code = "import sys; from interp.dissect.weight_parts import parse_restrict; parse_restrict('L0H1'); "
    code += "assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(
    "text, message",
    [
        ("L0H1x", "names no part"),
        ("blocks.0.atn", "did you mean 'attn'"),
        ("blocks.0.attn.W_X", "did you mean"),
        ("L0H1.W_X", "a head has no"),
        ("L0H0,L0H0", "twice"),
        ("attn", "names no part"),
    ],
)
def test_a_name_of_no_valid_form_is_one_line_naming_it(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_restrict(text)
    assert "\n" not in str(info.value)


def test_a_head_is_a_slice_of_its_layers_stacked_tensors(model):
    masks = restrict_masks(model, "L1H0")
    assert set(masks) == {f"blocks.1.attn.{m}" for m in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")}
    for name, mask in masks.items():
        assert mask[0].eq(1).all() and mask[1].eq(0).all(), name  # head 0 sampled, head 1 held


def test_modules_embeddings_and_single_matrices(model):
    assert set(restrict_masks(model, "blocks.0.mlp")) == {
        f"blocks.0.mlp.{p}" for p in ("W_in", "b_in", "W_out", "b_out")
    }
    assert set(restrict_masks(model, "embed,pos_embed")) == {"embed.W_E", "pos_embed.W_pos"}
    assert all(m is None for m in restrict_masks(model, "embed,pos_embed").values())
    (mask,) = restrict_masks(model, "L0H1.W_O").values()
    assert mask.shape == model.blocks[0].attn.W_O.shape and mask.sum() == mask[1].numel()
    assert len(restrict_masks(model, "")) == len(list(model.parameters()))


@pytest.mark.parametrize(
    "text, message", [("L2H0", "layer 2 is out of range"), ("L0H2", "head 2 is out of range")]
)
def test_layer_and_head_ranges_are_checked_on_the_model(model, text, message):
    with pytest.raises(ConfigError, match=message):
        restrict_masks(model, text)


def test_a_plain_module_takes_its_own_parameter_names():
    mlp = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    assert set(restrict_masks(mlp, "0")) == {"0.weight", "0.bias"}
    assert set(restrict_masks(mlp, ["2.weight"])) == {"2.weight"}
    with pytest.raises(ConfigError, match="did you mean '2.bias'"):
        restrict_masks(mlp, "2.bais")
    assert torch.is_tensor(mlp[0].weight)
