"""Study B's protocol end to end at toy scale, and the injection loop's contract."""

from __future__ import annotations

import shutil

import pytest
import torch

from analyses.studies.study_b import figures as study_b_figures
from analyses.studies.study_b import protocol as study_b
from interp.store.checkpoint import load_checkpoint
from interp.store.run_folder import read_done, read_metrics
from interp.training.config import finetune_config
from interp.wlmd.grid import GridSpec, Schedule

TINY = {"d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    out, before = tmp_path_factory.mktemp("b") / "adamw", torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return study_b.goldilocks(
            out, p=7, weight_norm=6.0, epochs=30, lr=3e-2, eval_every=10, model_overrides=TINY
        )
    finally:
        torch.set_num_threads(before)


def test_injection_reports_honestly_and_keeps_the_norm(source, tmp_path):
    summary = study_b.inject(
        tmp_path / "inj",
        source,
        "random",
        k=3,
        config=finetune_config(epochs=5, eval_every=2, target_acc=0.999),
    )
    assert summary["reached"] is False and summary["steps"] == 5
    records = read_metrics(tmp_path / "inj")
    assert [r["step"] for r in records] == [0, 2, 4, 5]
    assert {"test/acc", "train/noise/acc", "train/original/acc"} <= set(records[0])
    first, last = (
        load_checkpoint(tmp_path / "inj" / "checkpoints" / "step_000000"),
        load_checkpoint(tmp_path / "inj"),
    )
    norm = lambda sd: torch.linalg.vector_norm(torch.cat([v.flatten() for v in sd.values()])).item()  # noqa: E731
    assert norm(last.state_dict) == pytest.approx(norm(first.state_dict), rel=1e-5)
    assert norm(first.state_dict) > 6.0  # the new embedding rows add to the source's norm 6
    reached = study_b.inject(tmp_path / "easy", source, "sum", k=3, config=finetune_config(target_acc=0.0))
    assert reached["reached"] is True and reached["steps"] == 0


def test_injection_resumes_bit_identically(source, tmp_path):
    cfg = finetune_config(epochs=6, eval_every=2, checkpoint_every=3, target_acc=0.999)
    study_b.inject(tmp_path / "a", source, "square", k=3, config=cfg)
    study_b.inject(tmp_path / "b", source, "square", k=3, config=cfg)
    # Simulate a kill after step 3: drop the final checkpoint and DONE, then run again.
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "step_000006")
    (tmp_path / "b" / "checkpoints" / "LATEST").write_text("step_000003\n")
    (tmp_path / "b" / "DONE").unlink()
    study_b.inject(tmp_path / "b", source, "square", k=3, config=cfg)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)
    assert read_metrics(tmp_path / "a") == read_metrics(tmp_path / "b")
    assert read_done(tmp_path / "a") == read_done(tmp_path / "b")


def test_protocol_end_to_end(source, tmp_path):
    settings = study_b.WLMDSettings(
        steps=6, production_steps=4, walkers=2, every=1, max_samples=2, checkpoint_every=3
    )
    out, samples = study_b.wlmd_sample(
        tmp_path / "wlmd",
        source,
        settings,
        grid=GridSpec((-10.0, 4.0), (0.0, 10.5), 14, 21),
        schedule=Schedule(ln_f_max=0.05, rise=2, plateau=2),
        window=(-10.0, 4.0, 0.0, 10.5),
    )
    assert len(samples) == 2
    cfg = finetune_config(epochs=3, eval_every=1)
    for label, src in {"adamw": source, "wlmd": samples[0]}.items():
        study_b.inject(tmp_path / f"inj-{label}", src, "random", k=3, config=cfg)
    runs = {label: tmp_path / f"inj-{label}" for label in ("adamw", "wlmd")}
    assert len(study_b_figures.forgetting_figure(runs).data) == 4
    ranks = study_b_figures.rank_frame({"adamw": source, "wlmd": samples[0], "adamw after": runs["adamw"]})
    assert {"adamw", "wlmd", "adamw after"} <= set(ranks.columns) and (ranks["wlmd"] >= 1).all()
    assert len(study_b_figures.rank_figure({"adamw": source}).data) == 1
    cos = study_b_figures.cosine_frame(
        {label: (study_b.first_checkpoint(run), run) for label, run in runs.items()}
    )
    assert list(cos["model"]) == ["adamw", "wlmd"] and (cos["cosine"] <= 1 + 1e-9).all()


def test_walkers_from_their_own_starts(source, tmp_path):
    """`starts`: walker i starts at its own model and the walk measures each walker's cosine
    to its own start; a count other than the walkers, or another task, is refused at once.
    """
    other = study_b.goldilocks(
        tmp_path / "other",
        p=7,
        weight_norm=6.0,
        epochs=30,
        lr=3e-2,
        eval_every=10,
        model_overrides=TINY,
        seed=1,
    )
    settings = study_b.WLMDSettings(
        steps=3, production_steps=0, walkers=2, checkpoint_every=3, report_every=3
    )
    grid = GridSpec((-10.0, 4.0), (0.0, 10.5), 14, 21)
    out, _ = study_b.wlmd_sample(tmp_path / "wlmd", source, settings, grid=grid, starts=[source, other])
    first, last = study_b.walk_records(out)
    assert first["step"] == 0 and first["cosine"] == pytest.approx([1.0, 1.0])  # each at its own start
    for walker, start in enumerate((source, other)):  # ... which is the model it was given
        assert (first["x"][walker], first["y"][walker]) == pytest.approx(study_b.source_cvs(start), abs=1e-5)
    starts = [study_b.model_cvs(*study_b.load_source(s)[::2], 6.0)[0].flatten() for s in (source, other)]
    assert torch.nn.functional.cosine_similarity(starts[0], starts[1], dim=0) < 0.99  # two different starts
    assert min(last["cosine"]) < 1.0
    with pytest.raises(study_b.ConfigError, match="1 starts for 2 walkers"):
        study_b.wlmd_sample(tmp_path / "bad", source, settings, grid=grid, starts=[source])
    wider = study_b.goldilocks(tmp_path / "p11", p=11, weight_norm=6.0, epochs=2, model_overrides=TINY)
    with pytest.raises(study_b.ConfigError, match="another model or task"):
        study_b.wlmd_sample(tmp_path / "bad2", source, settings, grid=grid, starts=[source, wider])
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad2").exists()
