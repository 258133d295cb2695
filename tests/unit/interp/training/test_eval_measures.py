"""Circuit measures at every evaluation (`TrainConfig.eval_measures`, `interp.dissect.measures`):
logged at each evaluation, equal to the standalone analyses on the saved checkpoints, and the
same after a resume.
"""

from __future__ import annotations

import signal

import pytest

from analyses import get_analysis, load_subject
from interp.dissect.measures import MEASURES
from interp.errors import ConfigError, TrainingInterrupted
from interp.splits import split_digests
from interp.store import checkpoint_dir, open_run
from interp.store.run_folder import read_config, read_metrics
from interp.training import TrainConfig, train
from interp.training.config import EVAL_MEASURES
from interp.training.loop import StopFlag, TrainLoop, run_config
from tasks import MPSPTask
from tests.builders import tiny_transformer

TASK = MPSPTask(vocab=12, n=4, n_train=128, n_val=32, n_adv=32, r=0.75, shortcut="first")
CONFIG = TrainConfig(
    epochs=8,
    eval_every=2,
    eval_log_points=0,
    checkpoint_every=2,
    checkpoint_log_points=0,
    eval_measures=EVAL_MEASURES,
)
HEADS = [f"L{layer}H{head}" for layer in range(2) for head in range(2)]
KEYS = [
    *(f"adv/attn_pos0_{h}" for h in HEADS),
    *(f"weights/ov_parity_rho_{h}" for h in HEADS),
    "train/grad_cos",
    "train/grad_amp",
    "train/grad_amp_weighted",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("measures") / "run"
    train(out, tiny_transformer(TASK, seed=0), TASK, CONFIG, progress=False)
    return out


def test_the_config_names_exactly_the_implemented_measures():
    assert set(EVAL_MEASURES) == set(MEASURES)


def test_every_evaluation_logs_every_measure(run):
    records = read_metrics(run)
    assert [r["step"] for r in records] == [0, 2, 4, 6, 8]
    for record in records:
        assert set(KEYS) <= set(record)
    assert read_config(run)["train"]["eval_measures"] == list(EVAL_MEASURES)


def test_logged_measures_equal_the_analyses_of_the_saved_checkpoints(run):
    fingerprint, grads = get_analysis("fingerprint"), get_analysis("grads")
    for record in read_metrics(run):
        subject = load_subject(checkpoint_dir(run, record["step"]))
        fp = fingerprint.compute(subject, fingerprint.params())
        gr = grads.compute(subject, grads.params()).to_frame().iloc[0]  # row 0: all parameters
        for layer in range(2):
            for head in range(2):
                h = f"L{layer}H{head}"
                assert record[f"adv/attn_pos0_{h}"] == pytest.approx(
                    float(fp.attn_pos0[layer, head]), abs=1e-6
                )
                assert record[f"weights/ov_parity_rho_{h}"] == pytest.approx(
                    float(fp.ov_parity_rho[layer, head]), abs=1e-6
                )
        for key, column in (("grad_cos", "cos"), ("grad_amp", "amp"), ("grad_amp_weighted", "amp_weighted")):
            assert record[f"train/{key}"] == pytest.approx(float(gr[column]), rel=1e-5)


class _StopAfter(StopFlag):
    """A stop flag raised at the `n`-th step boundary, as SIGTERM would."""

    def __init__(self, n: int) -> None:
        self.reads, self.n = 0, n

    @property
    def signum(self) -> int | None:
        self.reads += 1
        return signal.SIGTERM if self.reads > self.n else None


def test_a_resumed_run_logs_the_same_measures(run, tmp_path):
    out, splits = tmp_path / "resumed", TASK.splits(CONFIG.data_seed)
    model = tiny_transformer(TASK, seed=0)
    with open_run(out, run_config(model, TASK, CONFIG), split_digests(splits)) as session:
        loop = TrainLoop(session, model, splits, CONFIG)
        loop.resume()
        with pytest.raises(TrainingInterrupted):
            loop.run(_StopAfter(5), progress=False)  # stops (and saves) at step 5
    train(out, tiny_transformer(TASK, seed=1), TASK, CONFIG, progress=False)  # resumes from step 5
    assert read_metrics(out) == read_metrics(run)


def test_bad_measures_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'attn_pos0'"):
        TrainConfig(eval_measures=("attn_pos",))
    with pytest.raises(ConfigError, match="eval_measures"):
        TrainConfig(eval_measures="attn_pos0")
    with pytest.raises(ConfigError, match="two non-empty groups"):
        consistent_only = MPSPTask(vocab=12, n=4, n_train=64, n_val=8, n_adv=8, r=1.0)
        model = tiny_transformer(consistent_only)
        train(
            tmp_path / "run",
            model,
            consistent_only,
            TrainConfig(eval_measures=("grad_groups",)),
            progress=False,
        )
