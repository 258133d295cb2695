"""Oracle: head fingerprints on hand-built weights with known answers, and against forward passes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

from analyses.fingerprint import ANALYSIS, FingerprintResult, Params, compute
from analyses.subject import Subject
from interp.dissect.heads import (
    attention_to_first,
    ov_parity_rho,
    qk_rho_empirical,
    qk_rho_from_weights,
    qk_scores_from_weights,
    readout_patterns,
)
from interp.errors import ConfigError
from models import Transformer, TransformerConfig
from tasks import MPSPTask
from tests.builders import tiny_config

V, N_CTX = 8, 4  # values 0..7, SEP = 8, three key positions before the readout


def _hand_built(d_vocab_out: int, d_model: int = 16) -> Transformer:
    """A no-LayerNorm, 1-layer, 2-head model with every weight zero (filled in by each test).

    Dimensions: 0 holds the value v, 1 flags SEP, 12..15 one-hot the position (read by nothing).
    """
    cfg = TransformerConfig(
        n_layers=1,
        n_heads=2,
        d_model=d_model,
        d_mlp=4,
        n_ctx=N_CTX,
        d_vocab=V + 1,
        d_vocab_out=d_vocab_out,
        d_head=3,
        normalization_type=None,
    )
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.W_E[:V, 0] = torch.arange(V, dtype=torch.float)
        model.W_E[V, 1] = 1.0
        model.W_pos[torch.arange(N_CTX), 12 + torch.arange(N_CTX)] = 1.0
        attn = model.blocks[0].attn
        # Score = (query . e1) (+-key . e0) / sqrt(d_head): proportional to v, up in head 0, down in head 1.
        attn.W_Q[:, 1, 0] = 1.0
        attn.W_K[0, 0, 0], attn.W_K[1, 0, 0] = 1.0, -1.0
    return model


def test_weights_qk_rho_is_one_for_a_head_that_scores_by_value():
    model = _hand_built(d_vocab_out=2)
    scores = qk_scores_from_weights(model)
    assert scores.shape == (1, 2, N_CTX - 1, V)
    torch.testing.assert_close(scores[0, 0], torch.arange(V).float().expand(N_CTX - 1, V) / 3**0.5)
    pooled, per_pos = qk_rho_from_weights(model)
    torch.testing.assert_close(pooled, torch.tensor([[1.0, -1.0]], dtype=torch.float64))
    torch.testing.assert_close(per_pos, torch.tensor([[[1.0] * 3, [-1.0] * 3]], dtype=torch.float64))


def test_ov_parity_rho_is_one_for_a_head_writing_plus_v_even_minus_v_odd():
    model = _hand_built(d_vocab_out=2)
    with torch.no_grad():
        v = torch.arange(V, dtype=torch.float)
        model.W_E[:V, 2] = torch.where(v % 2 == 0, v, -v)
        attn = model.blocks[0].attn
        attn.W_V[0, 2, 0], attn.W_O[0, 0, 3] = 1.0, 1.0  # head 0 writes +v (even) / -v (odd) on dim 3
        attn.W_V[1, 0, 0], attn.W_O[1, 0, 3] = 1.0, 1.0  # head 1 writes v: blind to parity
        model.W_U[3, 1], model.W_U[3, 0] = 1.0, -1.0  # contrast direction W_U[:, 1] - W_U[:, 0] = 2 e3
    rho, shift, per_pos = ov_parity_rho(model)
    # Odd tokens push towards class 0: rho = -1 at shift 0, so |rho| = 1 with shift 1.
    assert rho[0, 0].item() == pytest.approx(1.0) and shift[0, 0].item() == 1
    torch.testing.assert_close(per_pos[0, 0], torch.ones(N_CTX - 1, dtype=torch.float64))
    assert abs(rho[0, 1].item()) < 0.5


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_ov_parity_rho_mod3_finds_a_cyclically_shifted_residue_writer(offset):
    model = _hand_built(d_vocab_out=3)
    with torch.no_grad():
        v = torch.arange(V)
        model.W_E[v, 4 + v % 3] = 1.0  # one-hot residue in dims 4..6
        attn = model.blocks[0].attn
        for j in range(3):
            attn.W_V[0, 4 + j, j] = 1.0
            attn.W_O[0, j, 8 + (j + offset) % 3] = 1.0  # residue j -> class (j + offset) mod 3
            model.W_U[8 + j, j] = 1.0
    rho, shift, _ = ov_parity_rho(model)
    assert rho[0, 0].item() == pytest.approx(1.0) and shift[0, 0].item() == offset
    assert torch.isnan(rho[0, 1]) or abs(rho[0, 1].item()) < 1e-12  # head 1 writes nothing


def _random_model(n_layers: int = 2, seed: int = 0) -> Transformer:
    """A LayerNorm model with every parameter (biases, LN weights, W_pos) random and nonzero."""
    cfg = TransformerConfig(
        n_layers=n_layers, n_heads=2, d_model=16, d_mlp=32, n_ctx=N_CTX + 1, d_vocab=V + 1, d_vocab_out=2
    )
    model = Transformer(cfg, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def _scores_at_readout(model: Transformer, layer: int) -> torch.Tensor:
    """hook_attn_scores from the readout, for sequences [v, v, ..., v, SEP]: [heads, key_pos, V]."""
    n = model.cfg.n_ctx - 1
    tokens = torch.cat([torch.arange(V)[:, None].expand(V, n), torch.full((V, 1), V)], dim=1)
    _, cache = model.run_with_cache(tokens)
    return cache[f"blocks.{layer}.attn.hook_attn_scores"][:, :, -1, :-1].permute(1, 2, 0)


def test_layer0_weight_scores_equal_the_forward_pass_scores():
    model = _random_model()
    # Independent recomputation: LN by hand, then q . k / sqrt(d_head) with explicit einsums.
    tokens = torch.cat([torch.arange(V)[:, None].expand(V, N_CTX), torch.full((V, 1), V)], dim=1)
    _, cache = model.run_with_cache(tokens)
    resid = cache["blocks.0.hook_resid_pre"]
    ln = model.blocks[0].ln1
    x = (resid - resid.mean(-1, keepdim=True)) / (
        resid.var(-1, unbiased=False, keepdim=True) + ln.eps
    ).sqrt() * ln.w + ln.b
    attn = model.blocks[0].attn
    q = torch.einsum("bd,hde->bhe", x[:, -1], attn.W_Q) + attn.b_Q
    k = torch.einsum("bpd,hde->bhpe", x[:, :-1], attn.W_K) + attn.b_K[:, None]
    by_hand = torch.einsum("bhe,bhpe->hpb", q, k) / model.cfg.d_head**0.5
    weights = qk_scores_from_weights(model)[0].detach()
    torch.testing.assert_close(weights, by_hand, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, _scores_at_readout(model, 0), atol=1e-5, rtol=1e-5)


def test_later_layer_direct_path_is_exact_when_earlier_layers_write_nothing():
    model = _random_model()
    with torch.no_grad():
        for name in ("W_O", "b_O"):
            getattr(model.blocks[0].attn, name).zero_()
        for name in ("W_out", "b_out"):
            getattr(model.blocks[0].mlp, name).zero_()
    torch.testing.assert_close(
        qk_scores_from_weights(model)[1], _scores_at_readout(model, 1), atol=1e-5, rtol=1e-5
    )


def test_weights_rho_equals_scipy_on_the_pooled_scores():
    model = _random_model()
    scores = qk_scores_from_weights(model)
    pooled, _ = qk_rho_from_weights(model)
    values = np.tile(np.arange(V), N_CTX)
    expected = scipy.stats.spearmanr(scores[1, 0].flatten().numpy(), values).statistic
    assert pooled[1, 0].item() == pytest.approx(expected, abs=1e-9)


def test_empirical_measures_equal_hand_computation_from_the_full_cache():
    model = _random_model()
    tokens = torch.cat(
        [
            torch.randint(0, V, (40, N_CTX), generator=torch.Generator().manual_seed(3)),
            torch.full((40, 1), V),
        ],
        dim=1,
    )
    patterns = readout_patterns(model, tokens, chunk=16)
    _, cache = model.run_with_cache(tokens)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][:, :, -1]  # [batch, head, key]
        torch.testing.assert_close(patterns[:, layer], pattern)
        for head in range(2):
            mean0 = pattern[:, head, 0].double().mean()
            assert attention_to_first(patterns)[layer, head].item() == pytest.approx(mean0.item(), abs=1e-9)
            expected = scipy.stats.spearmanr(
                pattern[:, head, :-1].flatten().numpy(), tokens[:, :-1].flatten().numpy()
            ).statistic
            assert qk_rho_empirical(patterns, tokens)[layer, head].item() == pytest.approx(expected, abs=1e-6)


@pytest.fixture
def subject() -> Subject:
    task = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)
    cfg = tiny_config(task)
    return Subject(Transformer(cfg, seed=0), task, task.splits(0), step=7)


def test_compute_through_a_subject_and_save_load_round_trip(subject, tmp_path):
    result = ANALYSIS.compute(subject, Params(split="val"))
    assert ANALYSIS.name == FingerprintResult.analysis == "fingerprint"
    frame = result.to_frame()
    assert list(frame[["layer", "head"]].itertuples(index=False, name=None)) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]
    assert result.step == 7 and result.params["split"] == "val" and result.m == 2
    assert "split 'val'" in result.figure().layout.title.text
    loaded = FingerprintResult.load(result.save(tmp_path / "fp"))
    for name in ("qk_rho_weights", "qk_rho_empirical", "attn_pos0", "ov_parity_rho", "ov_parity_shift"):
        torch.testing.assert_close(getattr(loaded, name), getattr(result, name))
    assert loaded.to_frame().equals(frame)


def test_bad_split_and_modulus_are_config_errors(subject):
    with pytest.raises(ConfigError, match="did you mean 'adv'"):
        compute(subject, Params(split="adb"))
    with pytest.raises(ConfigError, match="modulus"):
        compute(subject, Params(modulus=5))
