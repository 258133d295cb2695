"""`llc` on any module (a plain MLP, a TransformerLens HookedTransformer), its health flags, its settings.

The exact values are the oracle tests' (tests/oracle/test_learning_coefficient.py); these check
the core's contract: any `nn.Module` with a loss_fn, weights untouched, vmap and loop agreeing,
each flag raised by the case it describes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformer_lens import HookedTransformer, HookedTransformerConfig

from interp.dissect.learning_coefficient import llc, reference_loss
from interp.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FAST = dict(step_size=1e-3, n_beta=50.0, localization=10.0, chains=2, draws=30, burn_in=10)


def _mlp_and_data(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=gen)
    y = (x[:, 0] > 0).long()
    mlp = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
    return mlp, (x, y)


def _ce(model: nn.Module, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def test_a_plain_mlp_with_minibatches_and_its_weights_left_as_they_were():
    mlp, data = _mlp_and_data()
    before = {k: v.clone() for k, v in mlp.state_dict().items()}
    result = llc(mlp, data, _ce, batch_size=16, **FAST)
    assert result.losses.shape == (2, 30) and torch.isfinite(result.losses).all()
    assert result.sampled == sum(p.numel() for p in mlp.parameters())
    assert all(torch.equal(before[k], v) for k, v in mlp.state_dict().items())
    assert result.init_loss == pytest.approx(
        float(_ce(mlp, data).detach()), rel=1e-6
    )  # the whole data, not a batch
    frame = result.to_frame()
    assert list(frame["chain"]) == [0, 1] and frame["llc"].mean() == pytest.approx(result.estimate)
    assert len(result.figure().data) == 3  # two chains' traces and the running estimate


def test_vmap_over_chains_and_a_loop_agree():
    mlp, data = _mlp_and_data()
    vmapped = llc(mlp, data, _ce, batch_size=16, **FAST)
    # The loop puts each chain's weights into the model for its pass: they are put back after,
    # and so is a frozen weight's requires_grad.
    mlp[2].bias.requires_grad_(False)
    before = {k: v.clone() for k, v in mlp.state_dict().items()}
    looped = llc(mlp, data, _ce, batch_size=16, vectorize=False, **FAST)
    torch.testing.assert_close(vmapped.losses, looped.losses, rtol=1e-4, atol=1e-5)
    assert all(torch.equal(before[k], v) for k, v in mlp.state_dict().items())
    assert [p.requires_grad for p in mlp.parameters()] == [True, True, True, False]


def test_a_transformer_lens_hooked_transformer_per_head():
    cfg = HookedTransformerConfig(
        n_layers=1, d_model=16, n_ctx=4, d_head=4, n_heads=2, d_vocab=10, d_mlp=32, act_fn="relu", seed=0
    )
    model = HookedTransformer(cfg)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(10, (32, 4), generator=gen)
    labels = tokens[:, 0]

    def loss_fn(m: nn.Module, batch):
        return F.cross_entropy(m(batch[0])[:, -1], batch[1])

    head = llc(model, (tokens, labels), loss_fn, restrict="L0H1", **FAST)
    assert head.sampled == 3 * 16 * 4 + 4 * 16 + 3 * 4  # W_Q, W_K, W_V, W_O slices and b_Q, b_K, b_V
    assert torch.isfinite(head.losses).all()
    looped = llc(model, (tokens, labels), loss_fn, restrict="L0H1", vectorize=False, **FAST)
    torch.testing.assert_close(looped.losses, head.losses, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="head 2 is out of range"):
        llc(model, (tokens, labels), loss_fn, restrict="L0H2", **FAST)


def test_rmsprop_sgld_runs_and_differs_from_sgld():
    mlp, data = _mlp_and_data()
    rms = llc(mlp, data, _ce, sampler="rmsprop", **dict(FAST, step_size=1e-6))
    sgld = llc(mlp, data, _ce, **FAST)
    assert torch.isfinite(rms.losses).all() and not torch.equal(rms.losses, sgld.losses)


def _off_minimum():
    """Linear regression whose weights sit away from the least-squares minimum."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(128, 2, generator=gen, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -1.0], dtype=torch.float64)
    model = nn.Linear(2, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()  # the minimum is (1, -1)
    return model, (x, y)


def _mse(model: nn.Module, batch):
    return 0.5 * (model(batch[0]).squeeze(-1) - batch[1]).square().mean()


def test_a_checkpoint_that_is_not_a_minimum_is_flagged_negative():
    model, data = _off_minimum()
    result = llc(
        model, data, _mse, step_size=1e-3, n_beta=100.0, localization=1.0, chains=4, draws=200, burn_in=0
    )
    assert result.estimate < 0 and "negative" in result.health.flags


def test_a_step_size_far_too_large_is_flagged():
    model, data = _off_minimum()
    with np.errstate(over="ignore", invalid="ignore"):
        result = llc(
            model, data, _mse, step_size=1.0, n_beta=100.0, localization=1.0, chains=2, draws=50, burn_in=0
        )
    assert {"nan", "diverged"} & set(result.health.flags)


def test_healthy_chains_raise_no_flag():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(128, 2, generator=gen, dtype=torch.float64)
    y = x @ torch.tensor([1.0, -1.0], dtype=torch.float64)
    model = nn.Linear(2, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.linalg.lstsq(x, y[:, None]).solution.T)
    result = llc(
        model, (x, y), _mse, step_size=2e-2, n_beta=20.0, localization=10.0, chains=4, draws=800, burn_in=100
    )
    assert result.health.flags == () and result.health.rhat < 1.01


@pytest.mark.parametrize(
    "bad",
    [
        {"step_size": 0.0},
        {"step_size": -1e-3},
        {"chains": 0},
        {"draws": 0},
        {"sampler": "hmc"},
        {"n_beta": -1.0},
    ],
)
def test_settings_out_of_range_are_refused(bad):
    mlp, data = _mlp_and_data()
    with pytest.raises(ConfigError):
        llc(mlp, data, _ce, **{**FAST, **bad})


def test_the_reference_loss_is_over_every_chunk():
    mlp, data = _mlp_and_data()
    assert reference_loss(mlp, data, _ce, chunk=10) == pytest.approx(float(_ce(mlp, data).detach()), rel=1e-6)


def test_checkpoint_frame_gives_one_row_a_checkpoint_with_healthy_flags_empty(tmp_path):
    import pandas as pd

    from interp.dissect.llc_figures import checkpoint_frame

    rows = [(10, 3.0, 0.5, "ok"), (0, 1.0, 0.2, "negative,rhat")]  # an evolve table: a row a chain
    table = pd.DataFrame(
        [
            {"chain": c, "step": s, "llc": e + c, "estimate": e, "se": se, "flags": f}
            for s, e, se, f in rows
            for c in (0, 1)
        ]
    )
    expected = [[0, 1.0, 0.2, "negative,rhat"], [10, 3.0, 0.5, ""]]
    assert checkpoint_frame(table)[["step", "estimate", "se", "flags"]].values.tolist() == expected
    table.loc[table["flags"] == "ok", "flags"] = ""  # an empty cell, read back from CSV as NaN
    table.to_csv(tmp_path / "llc.csv", index=False)
    assert checkpoint_frame(pd.read_csv(tmp_path / "llc.csv"))["flags"].tolist() == ["negative,rhat", ""]
