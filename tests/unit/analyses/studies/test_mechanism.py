"""Study A's mechanism test (`analyses.studies.study_a.mechanism`, `mechanism_io`): the embedding probe
over checkpoints finds a parity direction where one was put, the preregistered rule classifies
runs as it says, and the record round-trips into the docs section.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from analyses.studies.study_a.evolution import phase2
from analyses.studies.study_a.mechanism import (
    MechanismResult,
    Params,
    mechanism,
    probe_embeddings,
    summarise_runs,
    summarise_shortcuts,
    verdict,
)
from analyses.studies.study_a.mechanism_io import docs_section, find_runs, load_record, write_record
from interp.dissect.probes import embedding_probe
from interp.errors import ConfigError
from interp.store.checkpoint import save_checkpoint
from interp.store.run_folder import append_metrics, create_run, mark_done, read_metrics

V, D = 16, 32
FAST = Params(folds=3, shuffles=2)


def _embedding(strength: float, seed: int, *, top_only: bool = False) -> torch.Tensor:
    """W_E [V + 1, D]: Gaussian rows plus `strength` times +-1 (token parity) along one direction
    (only on the larger half of the values if `top_only`); the last row is the readout token.
    """
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(V + 1, D, generator=gen)
    sign = (torch.arange(V) % 2) * 2.0 - 1
    if top_only:
        sign = sign * (torch.arange(V) >= V // 2)
    w[:V, 0] += strength * sign
    return w


def test_the_probe_finds_parity_where_it_was_written_and_not_before():
    steps = [0, 100, 200, 300, 400]
    strengths = [0.0, 0.0, 0.0, 4.0, 4.0]  # written into W_E at epoch 300
    out = probe_embeddings([(s, _embedding(a, seed=s)) for s, a in zip(steps, strengths)], FAST)
    assert out["steps"] == steps
    assert all(a < 0.9 for a in out["all"][:3]) and all(a == 1.0 for a in out["all"][3:])
    assert all(h < 0.9 for h in out["shuffled_high"])  # permuted parities are never decodable here


def test_partial_parity_shows_on_the_larger_values_only():
    (top_only,) = [probe_embeddings([(0, _embedding(6.0, seed=1, top_only=True))], FAST)]
    assert top_only["top"][0] == 1.0
    assert top_only["bottom"][0] < 0.8
    assert top_only["all"][0] == pytest.approx((top_only["top"][0] + top_only["bottom"][0]) / 2)


def test_the_accuracy_is_the_library_embedding_probes():
    w = _embedding(1.0, seed=3)
    out = probe_embeddings([(0, w)], FAST)
    expected = embedding_probe(w[:V], torch.arange(V) % 2, FAST.folds, FAST.c, FAST.seed).accuracy
    assert out["all"][0] == expected


def _frame(rows: list[tuple[str, str, int | None, list[float]]], steps=(0, 100, 200, 300)) -> pd.DataFrame:
    """A probe table: (run, shortcut, onset, accuracy at each step); baseline well below 0.9."""
    records = []
    for run, shortcut, onset, accuracy in rows:
        for step, acc in zip(steps, accuracy):
            records.append(
                {"run": run, "shortcut": shortcut, "vocab": V, "onset": onset, "epoch": step, "all": acc}
                | {"top": acc, "bottom": acc, "shuffled_mean": 0.5, "shuffled_high": 0.7}
            )
    frame = pd.DataFrame(records)
    frame["onset"] = frame["onset"].astype("Int64")
    return frame


def test_the_rule_classifies_each_run_as_written():
    frame = _frame(
        [
            ("a", "first", 250, [0.5, 0.95, 1.0, 1.0]),  # decoded at 100, onset 250
            ("b", "first", 150, [0.5, 0.6, 0.95, 1.0]),  # decoded at 200, after the onset
            ("c", "first", None, [0.5, 0.6, 0.92, 0.9]),  # decoded, no phase 2
            ("d", "max", None, [0.5, 0.6, 0.8, 0.85]),  # never
            ("e", "max", 300, [0.95, 0.95, 0.95, 0.95]),  # initial checkpoint at the threshold
        ]
    )
    runs = summarise_runs(frame, 0.9).set_index("run")
    assert list(runs["outcome"]) == ["before phase 2", "after onset", "without phase 2", "never", "flagged"]
    assert runs.loc["a", "lag"] == -150 and runs.loc["b", "lag"] == 50
    assert list(runs["by_reference"]) == [True, False, True, False, False]
    assert runs.loc["c", "reference"] == 300  # no phase 2: the last checkpoint
    assert runs.loc["b", "last_before"] == 100 and runs.loc["b", "acc_before"] == 0.6
    summary = summarise_shortcuts(runs.reset_index()).set_index("shortcut")
    assert summary.loc["first", "decoded_by_reference"] == 2 and summary.loc["first", "with_phase2"] == 2
    assert summary.loc["first", "before_phase2"] == 1 and summary.loc["first", "after_onset"] == 1
    assert summary.loc["max", "flagged"] == 1 and summary.loc["max", "decoded_by_reference"] == 0


def test_a_baseline_at_the_threshold_flags_the_run():
    frame = _frame([("a", "first", None, [0.5, 0.95, 1.0, 1.0])])
    frame.loc[frame["epoch"] == 200, "shuffled_high"] = 0.9
    assert summarise_runs(frame, 0.9)["outcome"].tolist() == ["flagged"]


@pytest.mark.parametrize(
    ("first", "top", "expected"),
    [
        ([[0.5, 0.95, 1, 1]] * 3, [[0.5, 0.6, 0.6, 0.7]] * 3, "supported"),
        ([[0.5, 0.95, 1, 1]] * 3, [[0.5, 0.95, 1, 1]] * 3, "contradicted"),
        ([[0.5, 0.95, 1, 1]] * 3, [[0.5, 0.95, 1, 1]] * 2 + [[0.5] * 4], "mixed"),
    ],
)
def test_the_verdict_follows_the_preregistered_rule(first, top, expected):
    rows = [(f"f{i}", "first", 250, a) for i, a in enumerate(first)]
    rows += [(f"m{i}", "max", None, a) for i, a in enumerate(top)]
    assert verdict(summarise_shortcuts(summarise_runs(_frame(rows), 0.9))) == expected


def test_most_phase2_runs_decoding_after_their_onset_contradicts():
    rows = [(f"f{i}", "first", 50, [0.5, 0.95, 1, 1]) for i in range(3)]
    rows += [(f"m{i}", "max", None, [0.5] * 4) for i in range(3)]
    assert verdict(summarise_shortcuts(summarise_runs(_frame(rows), 0.9))) == "contradicted"


def _run(folder, shortcut: str, strengths: list[float], val_adv: list[float], vocab: int = V):
    """A run folder made by hand: W_E with a parity direction of the given strength at each
    checkpoint (every 100 epochs), and val/adv accuracy every 50 epochs.
    """
    model = {"kind": "transformer", "n_layers": 2, "n_heads": 2, "d_model": D, "d_vocab": vocab + 1}
    task = {"name": "mpsp", "shortcut": shortcut, "vocab": vocab, "r": 0.9}
    create_run(folder, {"model": model, "task": task, "train": {}})
    for i, strength in enumerate(strengths):
        save_checkpoint(folder, 100 * i, {"embed.W_E": _embedding(strength, seed=i)})
    for i, acc in enumerate(val_adv):
        append_metrics(folder, {"step": 50 * i, "val/acc": 1.0, "adv/acc": acc})
    mark_done(folder, {})
    return folder


def test_mechanism_over_run_folders_known_by_construction(tmp_path):
    # Positional: parity written at epoch 200, phase 2 from epoch 300 (adv rises after 300).
    first = _run(tmp_path / "map/seed_0", "first", [0, 0, 4, 4, 4], [0.1] * 7 + [0.6, 1.0])
    # Max: never written; no phase 2.
    top = _run(tmp_path / "max/seed_0", "max", [0, 0, 0], [0.1] * 5)
    result = mechanism([first, top], FAST)
    assert result.onsets == [phase2(read_metrics(first)).onset, None] == [300, None]
    runs = result.run_summary().set_index("run")
    assert runs["outcome"].tolist() == ["before phase 2", "never"]
    assert runs["decoded"].tolist()[0] == 200
    assert result.runs == ["first, vocab 16, seed_0", "max, vocab 16, seed_0"]  # no paths
    assert len(result.to_frame()) == 8 and result.verdict() == "supported"
    fig = result.figure()
    assert len([t for t in fig.data if t.mode == "markers"]) == 3  # the one onset, in each panel
    result.save(tmp_path / "saved", figure=False)
    loaded = MechanismResult.load(tmp_path / "saved")
    assert loaded.to_frame().equals(result.to_frame()) and loaded.onsets == result.onsets


def test_find_runs_picks_the_cell_by_config(tmp_path):
    _run(tmp_path / "a/seed_0", "first", [0], [0.1, 0.1])
    _run(tmp_path / "a/seed_1", "max", [0], [0.1, 0.1])
    _run(tmp_path / "b/seed_0", "first", [0], [0.1, 0.1], vocab=24)
    (tmp_path / "a/seed_1/DONE").unlink()
    assert find_runs(tmp_path, "first", V) == ([tmp_path / "a/seed_0"], [])
    assert find_runs(tmp_path, "max", V) == ([], [tmp_path / "a/seed_1"])
    with pytest.raises(ConfigError, match="not a folder"):
        find_runs(tmp_path / "missing", "first", V)


def test_the_docs_section_says_not_in_yet_then_shows_the_record(tmp_path):
    (note,) = docs_section(tmp_path / "mechanism")
    assert "not in yet" in note.data
    first = _run(tmp_path / "map/seed_0", "first", [0, 4, 4], [0.1] * 4 + [1.0])
    top = _run(tmp_path / "max/seed_0", "max", [0, 0, 0], [0.1] * 5)
    result = mechanism([first, top], FAST)
    write_record(result, tmp_path / "mechanism", {"vocab": V})
    summary = json.loads((tmp_path / "mechanism/summary.json").read_text())
    assert summary["verdict"] == result.verdict() and summary["vocab"] == V
    frame, _ = load_record(tmp_path / "mechanism")
    pd.testing.assert_frame_equal(frame, result.to_frame(), check_dtype=False)
    verdict_line, per_shortcut, per_run, fig = docs_section(tmp_path / "mechanism")
    assert result.verdict() in verdict_line.data and "before phase 2" in per_run.data
    assert "max" in per_shortcut.data and len(fig.data) > 0


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError, match="threshold=0.4"):
        probe_embeddings([(0, _embedding(0, 0))], Params(threshold=0.4))
    with pytest.raises(ConfigError, match="got no run"):
        MechanismResult.from_runs([], FAST)
