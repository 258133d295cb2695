"""Patching statistics (`interp.dissect.patch_stats`): bootstrap intervals over pairs, re-pairing
permutations and their p-values; and the ``patch`` analysis's use of them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import models
import tasks
from analyses import patch
from analyses.subject import Subject
from interp.dissect import patch_stats
from interp.dissect.patching import PatchPairs, patch_sweep
from interp.errors import ConfigError
from tests.builders import tiny_config

TASK = tasks.MPSPTask(vocab=12, n=4, n_train=64, n_val=48, n_adv=48)


def _pairs(n: int, seed: int = 0, n_labels: int = 3) -> PatchPairs:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 10, (2, n, 3), generator=gen)
    labels = torch.randint(0, n_labels, (2, n), generator=gen)
    return PatchPairs(tokens[0], tokens[1], labels[0], labels[1])


def test_bootstrap_counts_are_seeded_resamples_of_size_n():
    counts = patch_stats.bootstrap_counts(50, 200, seed=3)
    assert counts.shape == (200, 50) and (counts.sum(1) == 50).all() and (counts >= 0).all()
    assert torch.equal(counts, patch_stats.bootstrap_counts(50, 200, seed=3))
    assert not torch.equal(counts, patch_stats.bootstrap_counts(50, 200, seed=4))


def test_bootstrap_interval_of_a_mean_matches_the_normal_interval():
    # For a large sample the percentile interval of the mean is close to mean +- 1.96 s / sqrt(n).
    values = torch.from_numpy(np.random.default_rng(0).normal(2.0, 3.0, size=4000))
    stats = patch_stats.effect_statistics(values[None], values + 5, values, n_boot=4000, level=0.95)
    half = 1.959964 * values.std().item() / math.sqrt(len(values))
    assert stats.logit_diff_low.item() == pytest.approx(values.mean().item() - half, abs=0.15 * half)
    assert stats.logit_diff_high.item() == pytest.approx(values.mean().item() + half, abs=0.15 * half)


def test_recovery_interval_resamples_the_ratio_whole():
    # patched = target + 0.25 (source - target) for every pair: recovery is exactly 0.25 in every resample,
    # although the parts vary a lot from pair to pair.
    gen = torch.Generator().manual_seed(0)
    target = torch.randn(300, generator=gen)
    source = target + 1 + torch.rand(300, generator=gen) * 4
    patched = target + 0.25 * (source - target)
    stats = patch_stats.effect_statistics(patched[None], source, target, n_boot=500)
    torch.testing.assert_close(stats.recovery_low, torch.tensor([0.25]), atol=1e-6, rtol=0)
    torch.testing.assert_close(stats.recovery_high, torch.tensor([0.25]), atol=1e-6, rtol=0)
    assert stats.p_value.isnan().all(), "no permutations: no p-values"


def test_bad_statistics_settings_are_config_errors():
    x = torch.zeros(1, 5)
    with pytest.raises(ConfigError, match="n_boot"):
        patch_stats.effect_statistics(x, x[0], x[0], n_boot=0)
    with pytest.raises(ConfigError, match="ci"):
        patch_stats.effect_statistics(x, x[0], x[0], level=1.5)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 10_000), n_labels=st.integers(2, 4))
def test_repairing_permutes_rows_only_within_pairs_of_equal_labels(n, seed, n_labels):
    pairs = _pairs(n, seed % 7, n_labels)
    order = patch_stats.repairing(pairs, seed)
    assert sorted(order.tolist()) == list(range(n))
    assert torch.equal(pairs.source_labels[order], pairs.source_labels)
    assert torch.equal(pairs.target_labels[order], pairs.target_labels)
    again = patch_stats.repaired(pairs, order)
    assert torch.equal(again.target_tokens, pairs.target_tokens)
    assert torch.equal(again.source_tokens, pairs.source_tokens[order])


def test_p_values_are_small_for_outliers_and_one_for_typical_values():
    null = torch.randn(99, 3, generator=torch.Generator().manual_seed(0))
    observed = torch.tensor([100.0, null[:, 1].mean().item(), -100.0])
    p = patch_stats.permutation_p_values(observed, null)
    assert p[0].item() == pytest.approx(1 / 100) and p[2].item() == pytest.approx(1 / 100)
    assert p[1].item() == pytest.approx(1.0)


def test_a_measure_that_ignores_the_pairing_has_p_value_one():
    pairs = _pairs(60)

    def source_only(p: PatchPairs) -> torch.Tensor:  # a property of the source set, not of the pairing
        return p.source_tokens.float().mean(0)

    def paired(p: PatchPairs) -> torch.Tensor:
        return (p.source_tokens * p.target_tokens).float().mean(0)

    null = patch_stats.permutation_null(source_only, pairs, 20, seed=1)
    assert (patch_stats.permutation_p_values(source_only(pairs), null) == 1).all()
    null = patch_stats.permutation_null(paired, pairs, 20, seed=1)
    assert null.std(0).min() > 0, "re-pairing changes a pair-dependent measure"


def _subject() -> Subject:
    cfg = tiny_config(TASK)
    return Subject(model=models.Transformer(cfg, seed=1).eval(), task=TASK, splits=TASK.splits(0))


def test_patch_p_values_come_from_re_running_the_patch_on_re_paired_examples():
    subject = _subject()
    params = patch.Params(sites="resid_pre", source="val", permutations=9, n_boot=50, max_examples=30)
    result = patch.compute(subject, params)
    pairs = patch.pairs_for(subject, params)
    null = torch.stack(
        [
            patch_sweep(
                subject.model,
                patch_stats.repaired(pairs, patch_stats.repairing(pairs, params.seed + k)),
                ["resid_pre"],
            )
            .effects["resid_pre"]
            .logit_diff.flatten()
            for k in range(9)
        ]
    )
    torch.testing.assert_close(result.p_value, patch_stats.permutation_p_values(result.logit_diff, null))
    assert ((result.p_value >= 0.1 - 1e-6) & (result.p_value <= 1)).all()
    assert result.per_example.shape == (len(result.logit_diff), result.n_pairs)
    torch.testing.assert_close(result.per_example.mean(-1), result.logit_diff, atol=1e-6, rtol=0)
    assert (result.recovery_low <= result.recovery_high).all()
