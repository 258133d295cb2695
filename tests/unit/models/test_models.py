"""Unit tests of model configs, presets, initialisation and the model registry."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from interp.errors import ConfigError
from models import (
    PRESETS,
    QuadraticMLPConfig,
    Transformer,
    TransformerConfig,
    build_model,
    config_from_dict,
    config_to_dict,
    preset_config,
)

MPSP_TASK = SimpleNamespace(d_vocab=65, d_vocab_out=2, n_ctx=6)
TINY = dict(n_layers=2, n_heads=2, d_model=16, d_mlp=32, n_ctx=6, d_vocab=17, d_vocab_out=3)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_and_runs(name):
    cfg = preset_config(name, MPSP_TASK)
    model = build_model(cfg, seed=0)
    logits = model.readout(torch.randint(0, 65, (4, 6)))
    assert logits.shape == (4, 2)


def test_mpsp_presets_follow_the_study():
    for name, (layers, heads) in {
        "mpsp-1l1h": (1, 1),
        "mpsp-1l2h": (1, 2),
        "mpsp-2l1h": (2, 1),
        "mpsp-2l2h": (2, 2),
    }.items():
        cfg = preset_config(name, MPSP_TASK)
        assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.d_mlp) == (layers, heads, 64, 128)
        assert (cfg.normalization_type, cfg.act_fn, cfg.attention_dir) == ("LN", "relu", "causal")
    modadd = preset_config("modadd-1l", SimpleNamespace(d_vocab=68, d_vocab_out=67, n_ctx=3))
    assert (modadd.n_heads, modadd.d_head, modadd.d_mlp, modadd.normalization_type) == (4, 32, 512, None)


def test_quadratic_mlp_preset_init_std_is_16n_to_minus_one_third():
    cfg = preset_config("quadratic-mlp", SimpleNamespace(d_vocab=97, d_vocab_out=97, n_ctx=3))
    assert cfg.d_hidden == 500 and cfg.init_std == pytest.approx(0.05)
    model = build_model(cfg, seed=0)
    assert [p.std().item() for p in model.parameters()] == pytest.approx([0.05] * 3, rel=0.05)
    assert not any("b" in name.split(".")[-1][:1] for name, _ in model.named_parameters())


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"'mpsp-2l2' .*did you mean 'mpsp-2l2h'"):
        preset_config("mpsp-2l2", MPSP_TASK)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(d_model=15), "d_model=15 is not divisible by n_heads=2"),
        (dict(act_fn="tanh"), "TransformerConfig.act_fn = 'tanh'"),
        (dict(n_layers=0), "TransformerConfig.n_layers = 0"),
        (dict(attention_dir="left"), "TransformerConfig.attention_dir = 'left'"),
    ],
)
def test_bad_transformer_config_names_the_value(change, message):
    with pytest.raises(ConfigError, match=message):
        TransformerConfig(**{**TINY, **change})


def test_same_seed_same_weights_other_seed_other_weights():
    cfg = TransformerConfig(**TINY)
    a, b, c = Transformer(cfg, seed=3), Transformer(cfg, seed=3), Transformer(cfg, seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        if name.split(".")[-1].startswith("W_"):
            assert not torch.equal(pa, pc), name


def test_config_dict_round_trip_and_strictness():
    for cfg in (TransformerConfig(**TINY), QuadraticMLPConfig(d_vocab=7, d_vocab_out=7, d_hidden=5)):
        assert config_from_dict(config_to_dict(cfg)) == cfg
    with pytest.raises(ConfigError, match="unknown key 'n_layer'"):
        config_from_dict({"kind": "transformer", **TINY, "n_layer": 2})
    with pytest.raises(ConfigError, match="unknown model kind 'mlp'"):
        config_from_dict({"kind": "mlp"})


def test_readout_is_the_last_position_and_hooks_scope_cleanly():
    model = Transformer(TransformerConfig(**TINY))
    tokens = torch.randint(0, 17, (5, 6))
    torch.testing.assert_close(model.readout(tokens), model(tokens)[:, -1])
    seen = []
    with model.hooks(fwd_hooks=[("blocks.1.hook_resid_post", lambda act, hook: seen.append(act.shape))]):
        model(tokens)
    model(tokens)
    assert seen == [torch.Size([5, 6, 16])]


def test_model_without_positional_embeddings_has_no_w_pos_and_refuses_tl_conversion():
    from models.convert import to_transformer_lens_config

    cfg = TransformerConfig(**TINY, positional_embedding_type="none")
    model = Transformer(cfg)
    assert not any("W_pos" in name for name, _ in model.named_parameters())
    assert "hook_pos_embed" not in model.hook_dict
    with pytest.raises(ConfigError, match="positional_embedding_type='none'"):
        to_transformer_lens_config(cfg)
