"""Oracle: zeroing neurons at `hook_post` equals zeroing their rows of `W_U` (a weight edit on a copy)."""

from __future__ import annotations

import copy

import torch

from interp.dissect.pruning import prune_curve
from interp.metrics import evaluate
from models import QuadraticMLP, QuadraticMLPConfig
from tasks import ModAddTask


def test_hook_pruning_equals_unembedding_row_edits():
    task = ModAddTask(p=13, xi=0.2)
    splits = task.splits(1)
    model = QuadraticMLP(
        QuadraticMLPConfig(d_vocab=task.d_vocab, d_vocab_out=task.d_vocab_out, d_hidden=30), seed=0
    ).eval()
    order = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    counts, records = prune_curve(model, order, splits, fractions=[0, 0.25, 0.5, 0.9, 1.0], loss="mse")
    for count, record in zip(counts, records):
        edited = copy.deepcopy(model)
        with torch.no_grad():
            edited.W_U[order[:count]] = 0.0
        expected = evaluate(edited.fast_readout, splits, "mse")
        assert record.keys() == expected.keys()
        for key in record:
            assert abs(record[key] - expected[key]) < 1e-6, (count, key)
