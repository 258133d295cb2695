"""Oracle: per-group gradients against `loss.backward()` on each group and on the full batch."""

from __future__ import annotations

import pytest
import torch

from analyses.grads import ANALYSIS, GradsResult, Params, compute
from analyses.subject import Subject
from interp.dissect.gradient_groups import GroupGradients, block_of, gradient_stats, group_gradients
from interp.errors import ConfigError
from interp.metrics import per_example_loss
from models import QuadraticMLP, QuadraticMLPConfig, Transformer
from tasks import ModAddTask, MPSPTask
from tests.builders import tiny_config

TASK = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32)


def _transformer() -> Transformer:
    cfg = tiny_config(TASK)
    return Transformer(cfg, seed=0)


def _backward_grads(model, tokens, labels, mask, loss) -> dict[str, torch.Tensor]:
    """Gradient of the mean loss over `mask` by plain `loss.backward()`."""
    model.zero_grad(set_to_none=True)
    per_example_loss(model.readout(tokens[mask]), labels[mask], loss).mean().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("chunk", [8192, 50])
def test_count_weighted_group_gradients_equal_the_full_batch_gradient(chunk):
    model, train = _transformer(), TASK.splits(0)["train"]
    a, b = train.groups["consistent"], train.groups["opposing"]
    grads = group_gradients(model, train.tokens, train.labels, a, b, "cross_entropy", chunk=chunk)
    assert all(p.grad is None for p in model.parameters())  # autograd.grad leaves .grad alone
    full = _backward_grads(model, train.tokens, train.labels, torch.ones_like(a), "cross_entropy")
    assert grads.names == tuple(full) and (grads.n_a, grads.n_b) == (115, 13)
    for name, net in zip(grads.names, grads.net()):
        torch.testing.assert_close(net, full[name], atol=1e-6, rtol=1e-5)


def test_total_and_block_statistics_equal_hand_computation_from_backward():
    model, train = _transformer(), TASK.splits(0)["train"]
    a, b = train.groups["consistent"], train.groups["opposing"]
    stats = gradient_stats(group_gradients(model, train.tokens, train.labels, a, b))
    g_a = _backward_grads(model, train.tokens, train.labels, a, "cross_entropy")
    g_b = _backward_grads(model, train.tokens, train.labels, b, "cross_entropy")
    n_a, n_b = 115, 13
    selections = {
        "total": lambda name: True,
        "blocks.0.attn": lambda name: name.startswith(("blocks.0.attn.", "blocks.0.ln1.")),
        "unembed": lambda name: name.startswith(("unembed.", "ln_final.")),
    }
    for block, keep in selections.items():
        i = stats.blocks.index(block)
        va = torch.cat([g.flatten() for name, g in g_a.items() if keep(name)]).double()
        vb = torch.cat([g.flatten() for name, g in g_b.items() if keep(name)]).double()
        assert stats.cos[i].item() == pytest.approx(
            torch.nn.functional.cosine_similarity(va, vb, dim=0).item(), abs=1e-5
        )
        assert stats.norm_a[i].item() == pytest.approx(va.norm().item(), rel=1e-5)
        assert stats.norm_b[i].item() == pytest.approx(vb.norm().item(), rel=1e-5)
        assert stats.amp_weighted[i].item() == pytest.approx(
            n_b * vb.norm().item() / (n_a * va.norm().item()), rel=1e-5
        )
        assert stats.net_norm[i].item() == pytest.approx(
            ((n_a * va + n_b * vb) / (n_a + n_b)).norm().item(), rel=1e-5
        )
    assert stats.blocks == (
        "total",
        "embed",
        "blocks.0.attn",
        "blocks.0.mlp",
        "blocks.1.attn",
        "blocks.1.mlp",
        "unembed",
    )
    assert stats.trivial_amp == pytest.approx(n_a / n_b)


def test_stationary_point_gives_the_trivial_identity():
    # n_a g_a + n_b g_b = 0: cosine -1, amplification n_a / n_b, count-weighted 1, no net gradient.
    g = (torch.randn(3, 4), torch.randn(5))
    grads = GroupGradients(("embed.W_E", "unembed.W_U"), g, tuple(-9 * t for t in g), n_a=90, n_b=10)
    stats = gradient_stats(grads)
    torch.testing.assert_close(stats.cos, -torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(stats.amp, torch.full((3,), 9.0, dtype=torch.float64))
    torch.testing.assert_close(stats.amp_weighted, torch.ones(3, dtype=torch.float64))
    torch.testing.assert_close(stats.net_rel, torch.zeros(3, dtype=torch.float64))


def test_quadratic_mlp_with_clean_and_corrupted_groups():
    task = ModAddTask(p=7, train_frac=0.6, xi=0.3)
    train = task.splits(0)["train"]
    model = QuadraticMLP(
        QuadraticMLPConfig(d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out, d_hidden=12), seed=0
    )
    a, b = train.groups["clean"], train.groups["corrupted"]
    grads = group_gradients(model, train.tokens, train.labels, a, b, "mse", chunk=10)
    full = _backward_grads(model, train.tokens, train.labels, torch.ones_like(a), "mse")
    for name, net in zip(grads.names, grads.net()):
        torch.testing.assert_close(net, full[name], atol=1e-6, rtol=1e-5)
    assert [block_of(n) for n in grads.names] == ["embed", "embed", "unembed"]
    result = compute(Subject(model, task, task.splits(0), loss="mse"), Params(groups="clean,corrupted"))
    assert result.loss == "mse" and result.blocks == ["total", "embed", "unembed"]
    assert (result.n_a, result.n_b) == (int(a.sum()), int(b.sum()))


def test_compute_through_a_subject_and_save_load_round_trip(tmp_path):
    subject = Subject(_transformer(), TASK, TASK.splits(0), step=3)
    result = ANALYSIS.compute(subject, Params())
    assert ANALYSIS.name == GradsResult.analysis == "grads"
    frame = result.to_frame()
    assert frame["block"].iloc[0] == "total" and frame["trivial_amp"].iloc[0] == pytest.approx(115 / 13)
    assert "stationary point" in result.figure().layout.title.text
    loaded = GradsResult.load(result.save(tmp_path / "grads"))
    assert (
        loaded.to_frame().equals(frame) and loaded.step == 3 and loaded.groups == ["consistent", "opposing"]
    )


def test_bad_groups_splits_and_losses_are_config_errors():
    subject = Subject(_transformer(), TASK, TASK.splits(0))
    with pytest.raises(ConfigError, match="did you mean 'opposing'"):
        compute(subject, Params(groups="consistent,oposing"))
    with pytest.raises(ConfigError, match="two groups"):
        compute(subject, Params(groups="consistent"))
    with pytest.raises(ConfigError, match="no 'opposing' examples"):
        compute(subject, Params(split="val"))
    with pytest.raises(ConfigError, match="did you mean 'train'"):
        compute(subject, Params(split="trian"))
    with pytest.raises(ConfigError, match="loss"):
        compute(subject, Params(loss="hinge"))


def test_repeated_calls_are_bitwise_equal_and_leave_the_determinism_setting_alone():
    model, train = _transformer(), TASK.splits(0)["train"]
    a, b = train.groups["consistent"], train.groups["opposing"]
    before = torch.are_deterministic_algorithms_enabled()
    first, second = (group_gradients(model, train.tokens, train.labels, a, b, chunk=40) for _ in range(2))
    assert torch.are_deterministic_algorithms_enabled() == before
    assert all(torch.equal(x, y) for x, y in zip(first.grad_a + first.grad_b, second.grad_a + second.grad_b))


def test_a_series_reuses_each_groups_chunks_until_a_tensor_changes():
    """A checkpoint series differentiates one split again and again: its chunks are the same
    tensors each time (so the fast readout's index plans, cached per token tensor, are built
    once), hold exactly the group's rows in order, and are rebuilt when the mask is written.
    """
    from interp.dissect.gradient_groups import _group_chunks

    train = TASK.splits(0)["train"]
    mask = train.groups["consistent"].clone()
    chunks = _group_chunks(train.tokens, train.labels, mask, 50)
    assert _group_chunks(train.tokens, train.labels, mask, 50) is chunks
    assert [len(t) for t, _ in chunks] == [50, 50, 15]
    assert torch.equal(torch.cat([t for t, _ in chunks]), train.tokens[mask])
    assert torch.equal(torch.cat([y for _, y in chunks]), train.labels[mask])
    mask[mask.nonzero()[0]] = False  # one example leaves the group, in place
    again = _group_chunks(train.tokens, train.labels, mask, 50)
    assert again is not chunks and torch.equal(torch.cat([t for t, _ in again]), train.tokens[mask])
    assert _group_chunks(train.tokens, train.labels, mask, 40) is not again  # another chunk size


@pytest.mark.parametrize("n_layers", [1, 2])
def test_the_analysis_on_the_fast_readout_matches_backward_through_the_hooked_readout(n_layers):
    # `grads` differentiates `fast_readout` (no hooks); the oracle is `loss.backward()` through
    # the hooked `readout`, per group, with every block's norms and cosine compared at 1e-5.
    model = Transformer(tiny_config(TASK, n_layers=n_layers), seed=1)
    train = TASK.splits(0)["train"]
    a, b = train.groups["consistent"], train.groups["opposing"]
    result = compute(Subject(model, TASK, TASK.splits(0)), Params())
    ga = _backward_grads(model, train.tokens, train.labels, a, "cross_entropy")
    gb = _backward_grads(model, train.tokens, train.labels, b, "cross_entropy")
    names = tuple(ga)
    oracle = gradient_stats(
        GroupGradients(
            names, tuple(ga[n] for n in names), tuple(gb[n] for n in names), int(a.sum()), int(b.sum())
        )
    )
    for key in ("cos", "norm_a", "norm_b"):
        torch.testing.assert_close(
            getattr(result, key), getattr(oracle, key).to(getattr(result, key).dtype), atol=1e-5, rtol=1e-5
        )
