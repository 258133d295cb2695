"""The ``circuit`` result's tables and figures, on results built by hand (no model runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from analyses.circuit import CircuitResult, Params
from analyses.circuit_figure import circuit_over_training, node_xy
from interp.errors import ConfigError

EDGES = [("embed", "L0H0.q", 0), ("L0H0", "MLP0", 1), ("MLP0", "logits", 1)]


def _result(kept: list[float], gap: float = 1.0, step: int = 0) -> CircuitResult:
    exact = torch.tensor([[-0.5, 0.2, -0.9]])
    return CircuitResult(
        params={"method": "exact", "faithfulness": 0.9},
        step=step,
        split="adv",
        flips=["label"],
        n_pairs={"label": 4},
        n_layers=1,
        n_heads=1,
        n_pos=2,
        edge_upstream=[u for u, _, _ in EDGES],
        edge_receiver=[r for _, r, _ in EDGES],
        edge_pos=[p for _, _, p in EDGES],
        clean_logit_diff={"label": gap},
        corrupt_logit_diff={"label": 0.0},
        exact=exact,
        eap=exact * 0.5,
        eap_ig=exact * 0.9,
        agreement={"label": {"eap": {"spearman": 1.0, "pearson": 1.0, "top_k_overlap": 1.0, "k": 2}}},
        curve_sizes=[0, 1, 3],
        curve_faithfulness=torch.tensor([[0.0, 0.7, 1.0]]),
        curve_logit_diff=torch.tensor([[0.0, 0.7, 1.0]]),
        circuit_size={"label": 3},
        circuit_faithfulness={"label": 1.0},
        kept=torch.tensor([kept]),
    )


def test_frame_has_every_edge_with_three_scores_largest_first():
    frame = _result([1.0, 0.0, 1.0]).to_frame()
    assert list(frame["edge"]) == ["MLP0->logits@1", "embed->L0H0.q@0", "L0H0->MLP0@1"]
    assert {"exact", "eap", "eap_ig", "kept"} <= set(frame.columns)
    assert list(frame["kept"]) == [True, True, False]


def test_small_gap_is_reported_undefined():
    result = _result([1.0, 0.0, 1.0], gap=0.05)
    assert not result.gap_defined("label")
    assert "undefined" in result.table() and "undefined" in str(result.figure().layout.annotations)


def test_graph_figure_hovers_name_node_layer_head_and_position():
    fig = _result([1.0, 0.0, 1.0]).figure()
    hovers = " ".join(str(t) for trace in fig.data for t in (trace.text or []))
    assert "node L0H0" in hovers and "layer 0" in hovers and "head 0" in hovers and "position 1" in hovers
    kept_widths = [t.line.width for t in fig.data if t.mode == "lines" and t.line.color == "firebrick"]
    assert kept_widths, "kept edges are drawn highlighted"


def test_nodes_sit_by_layer_and_position():
    assert node_xy("embed", 1, 2, 2)[0] < node_xy("L0H1.q", 1, 2, 2)[0] < node_xy("L0H1", 1, 2, 2)[0]
    assert node_xy("MLP1", 3, 2, 2) == (6.0, 3.0) and node_xy("logits", 4, 2, 2) == (7.0, 4.0)


def test_circuit_over_training_shows_edges_entering_and_leaving():
    evolution = SimpleNamespace(
        steps=[0, 100], results=[_result([0, 0, 1], step=0), _result([1, 0, 0], step=100)]
    )
    fig = circuit_over_training(evolution, "label", phase_step=100)
    heat, dots = fig.data[0], fig.data[1]
    assert list(heat.y) == [
        "MLP0->logits@1",
        "embed->L0H0.q@0",
    ]  # by first entry; the never-kept edge left out
    # One equal-width column a checkpoint, its ticks naming the steps.
    assert sorted(zip(dots.x, dots.y)) == [(0, "MLP0->logits@1"), (1, "embed->L0H0.q@0")]
    assert list(fig.layout.xaxis.ticktext) == ["0", "100"] and list(heat.customdata[0]) == [0, 100]
    assert "``" not in heat.hovertemplate


def test_circuit_over_training_places_the_phase_line_between_its_checkpoints():
    steps = [0, 10, 100, 1000]
    evolution = SimpleNamespace(steps=steps, results=[_result([1, 0, 0], step=s) for s in steps])
    fig = circuit_over_training(evolution, "label", phase_step=55)
    assert fig.layout.shapes[0].x0 == pytest.approx(1.5)  # halfway from step 10 (column 1) to 100


@pytest.mark.parametrize(
    "bad", [{"method": "eapig"}, {"flips": "labels"}, {"steps": 0}, {"faithfulness": 1.5}]
)
def test_bad_params_are_config_errors(bad):
    with pytest.raises(ConfigError):
        Params(**bad)


def test_graph_figure_has_one_legend_entry_per_edge_kind():
    fig = _result([1.0, 0.0, 1.0]).figure()
    names = [t.name for t in fig.data if t.mode == "lines" and t.showlegend is not False]
    assert sorted(names) == ["kept edge", "other edge"]
