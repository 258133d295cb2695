"""The committed protocol-6 models (results/study-b/protocol-6-models, recomputed from
results/study-b/protocol-6-state) are the models their rows describe: evaluating them gives the
accuracies of their retention rows, and measuring them gives the committed ranks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from analyses.studies.study_b.used_rank import model_used_ranks
from analyses.subject import load_subject
from interp.dissect.weights import effective_rank
from interp.metrics import evaluate

ROOT = Path(__file__).resolve().parents[4]
B = ROOT / "results" / "study-b"
MODELS, STATE, RECORDS = B / "protocol-6-models", B / "protocol-6-state", B / "protocol-6"
ONE_EXAMPLE = 1 / 2245  # the test split of x + y mod 67 at train fraction 0.5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(path: Path) -> pd.DataFrame:
    return pd.read_csv(path).set_index(["seed", "model", "noise"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_evaluating_the_models_after_random_noise_gives_their_rows(seed):
    rows = _rows(MODELS / "study_b_runs.csv")
    for model in ("adamw", "wlmd"):
        run = MODELS / f"seed_{seed}" / f"inject-{model}-random"
        subject = load_subject(run)
        with torch.no_grad():
            acc = evaluate(subject.model.readout, {"test": subject.split("test")}, subject.loss)["test/acc"]
        done = json.loads((run / "DONE").read_text())
        assert acc == pytest.approx(done["final"]["test/acc"], abs=ONE_EXAMPLE / 2)
        assert acc == pytest.approx(rows.loc[(seed, model, "random"), "test_acc_after"], abs=ONE_EXAMPLE / 2)


def test_the_recomputed_rows_differ_from_the_records_by_the_documented_amount():
    """Recomputed on another machine (float32 rounds otherwise), the same models' injections give
    other accuracies: by at most 0.05 (docs/study_b_history.md quotes the largest difference).
    """
    kept, recorded = _rows(MODELS / "study_b_runs.csv"), _rows(RECORDS / "study_b_runs.csv")
    assert kept.index.sort_values().equals(recorded.index.sort_values())
    difference = (kept["test_acc_after"] - recorded.loc[kept.index, "test_acc_after"]).abs()
    assert difference.max() <= 0.05
    history = " ".join((ROOT / "docs" / "study_b_history.md").read_text().split())
    assert f"by up to {difference.max():.3f}" in history


def test_the_samples_raw_ranks_are_the_recorded_ones():
    """The AdamW model (from the state) has the recorded raw ranks exactly; the recomputed sample,
    a few 1e-6 of ln loss from the recorded one, has them to 1e-3.
    """
    recorded = pd.read_csv(RECORDS / "seed_0" / "ranks_random.csv").set_index("matrix")
    for label, path, tolerance in (
        ("adamw before", STATE / "seed_0" / "adamw", 1e-9),
        ("wlmd before", MODELS / "seed_0" / "wlmd-sample", 1e-3),
    ):
        model = load_subject(path).model
        for name in ("W_in", "W_out"):
            raw = effective_rank(getattr(model, name)[0])
            assert raw == pytest.approx(recorded.loc[name, label], rel=tolerance), (label, name)


def test_the_committed_used_ranks_are_those_of_the_committed_models():
    ranks = pd.read_csv(RECORDS / "used_ranks.csv").set_index(["seed", "model", "matrix"])
    source = load_subject(STATE / "seed_0" / "adamw")
    tokens = torch.cat([source.split(name).tokens for name in ("train", "test")])
    model = load_subject(MODELS / "seed_0" / "inject-wlmd-random").model
    measured = model_used_ranks(model, tokens).query("head == -1").set_index("matrix")
    for matrix, row in measured.iterrows():
        committed = ranks.loc[(0, "wlmd after random", matrix)]
        assert row["used"] == pytest.approx(committed["used"], rel=1e-6), matrix
        assert row["raw"] == pytest.approx(committed["raw"], rel=1e-6), matrix
        assert row["span"] == committed["span"], matrix
