"""`interp study-b inject` and `interp study-b wlmd` (and their old spellings) on a tiny
norm-constrained modular-addition run.
"""

from __future__ import annotations

import pytest

from interp.cli import main
from interp.store.checkpoint import list_checkpoints, load_checkpoint
from interp.store.run_folder import read_done


@pytest.fixture(scope="module")
def goldilocks(tmp_path_factory):
    out = tmp_path_factory.mktemp("b") / "adamw"
    with pytest.raises(SystemExit) as info:
        main(
            [
                "train",
                "--preset",
                "modadd-1l",
                "--p",
                "7",
                "--epochs",
                "6",
                "--weight-norm",
                "20",
                "--eval-every",
                "3",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    assert info.value.code == 0
    return out


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return info.value.code, out, err


# The protocol-2 commands at toy scale (--settings): p = 7, a tiny model, a few steps of everything.
TINY_PROTOCOL = {
    "p": 7,
    "weight_norm": 6.0,
    "epochs": 20,
    "lr": 3e-2,
    "model_overrides": {"d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 16},
    "wlmd": {
        "steps": 4,
        "max_steps": 6,
        "report_every": 2,
        "checkpoint_every": 2,
        "production_steps": 3,
        "dt": 1e-3,
        "every": 1,
        "max_samples": 1,
        "y_low": 0.0,
        "window_y": 0.0,
    },
    "k": 3,
    "max_steps": 3,
    "eval_every": 1,
}


def test_inject_reports_whether_the_target_was_reached(goldilocks, tmp_path, capsys):
    code, out, err = _cli(
        capsys,
        "study-b",
        "inject",
        "--ckpt",
        goldilocks,
        "--noise",
        "sum",
        "--k",
        "3",
        "--epochs",
        "4",
        "--out",
        tmp_path / "inj",
        "--no-progress",
    )
    assert code == 0, err
    summary = read_done(tmp_path / "inj")
    assert summary["reached"] is False and summary["steps"] == 4
    assert "reached 0.998: False after 4 steps" in out and "test/acc" in out


def test_wlmd_runs_both_phases_into_resumable_folders(goldilocks, tmp_path, capsys):
    code, out, err = _cli(
        capsys,
        "study-b",
        "wlmd",
        "--ckpt",
        goldilocks,
        "--out",
        tmp_path / "w",
        "--steps",
        "6",
        "--production-steps",
        "4",
        "--every",
        "2",
        "--walkers",
        "2",
    )
    assert code == 0, err
    assert "samples in the target window" in out
    assert list_checkpoints(tmp_path / "w" / "entropy")


def test_wlmd_grid_options_set_the_entropy_grid(goldilocks, tmp_path, capsys):
    code, _, err = _cli(
        capsys,
        "study-b",
        "wlmd",
        "--ckpt",
        goldilocks,
        "--out",
        tmp_path / "w",
        "--steps",
        "4",
        "--production-steps",
        "2",
        "--every",
        "1",
        "--walkers",
        "1",
        "--x-below",
        "0.75",
        "--x-above",
        "0.25",
        "--y-low",
        "0.5",
        "--bins",
        "4",
        "7",
    )
    assert code == 0, err
    S = load_checkpoint(tmp_path / "w" / "entropy").train_state["wlmd"]["S"]
    assert tuple(S.shape) == (1, 4, 7)  # walkers, x bins, y bins


def test_wlmd_refuses_a_grid_without_the_start(goldilocks, tmp_path, capsys):
    code, _, err = _cli(
        capsys,
        "study-b",
        "wlmd",
        "--ckpt",
        goldilocks,
        "--out",
        tmp_path / "w",
        "--x-below",
        "0",
        "--x-above",
        "1",
    )
    assert code == 2 and "WLMDSettings.x_below = 0.0" in err and not (tmp_path / "w").exists()


def test_inject_refuses_a_study_a_run(tmp_path, capsys):
    run = tmp_path / "a"
    assert (
        _cli(
            capsys,
            "train",
            "--preset",
            "mpsp-1l1h",
            "--vocab",
            "10",
            "--n",
            "4",
            "--n-train",
            "64",
            "--n-val",
            "16",
            "--n-adv",
            "16",
            "--epochs",
            "2",
            "--out",
            run,
            "--no-progress",
        )[0]
        == 0
    )
    code, _, err = _cli(capsys, "study-b", "inject", "--ckpt", run, "--out", tmp_path / "x")
    assert code == 2 and "modular-addition" in err


def test_protocol_2_in_one_command_then_the_tables_from_its_records(tmp_path, capsys):
    # Issue 18's one command at toy scale: the protocol-2 preset (chunked walk to a cosine
    # target or a budget, injections to the target) with sizes shrunk by --settings, records
    # exported; then the tables rebuilt from the records alone (the run folders deleted).
    import json
    import shutil

    out, dest = tmp_path / "runs", tmp_path / "results"
    code, text, err = _cli(
        capsys,
        "study-b",
        "measure",
        out,
        "--seeds",
        "0",
        "--preset",
        "protocol-2",
        "--settings",
        json.dumps(TINY_PROTOCOL),
        "--export",
        dest,
    )
    assert code == 0, err
    settings = json.loads((dest / "settings.json").read_text())
    assert settings["wlmd"]["target_cosine"] == 0.9 and settings["max_steps"] == 3  # preset + overrides
    assert settings["injection_keep_norm"] is False and settings["injection_lr"] == 3e-3
    injection = json.loads((dest / "seed_0" / "inject-adamw-random" / "config.json").read_text())
    assert injection["train"]["weight_norm"] is None and injection["train"]["lr"] == 3e-3
    walk = json.loads((dest / "seed_0" / "walk.json").read_text())
    assert walk[-1]["step"] in (4, 6) and all("S" not in r for r in walk[:-1])
    shutil.rmtree(out)
    code, text, err = _cli(capsys, "study-b", "records", dest)
    assert code == 0, err
    assert text.count("| random | 0 |") == 1 and "cos before/after" in text and "walk_cosine_max" in text


def test_protocol_2_walkers_starts_each_walker_at_its_own_model_and_injects_a_far_one(tmp_path, capsys):
    # The adopted shorter road at toy scale: three walkers, walker i > 0 at the AdamW model of
    # init seed 1000 i; the injected WLMD model is the last sample of a walker whose cosine to
    # its own start reached the target at the walk's end (any walker's when none did), and the
    # table marks the WLMD runs "claim not tested" exactly when the walk missed a target.
    import dataclasses
    import json

    from analyses.studies.study_b import measure as study_b_measure

    # Production looks at every step with a window that holds every state, so every walker saves samples.
    wlmd = {"production_steps": 4, "dt": 3e-2, "max_samples": 6, "window_x": 100.0, "target_cosine": 0.9999}
    tiny = {**TINY_PROTOCOL, "max_steps": 2, "wlmd": {**TINY_PROTOCOL["wlmd"], **wlmd}}
    out, dest = tmp_path / "runs", tmp_path / "results"
    code, _, err = _cli(
        capsys, "study-b", "measure", out, "--seeds", "3", "--preset", "protocol-2-walkers",
        "--settings", json.dumps(tiny), "--export", dest,
    )  # fmt: skip
    assert code == 0, err
    settings = json.loads((dest / "settings.json").read_text())
    assert settings["walker_starts"] == "own" and settings["target_flatness"] == 0.8
    assert settings["wlmd"]["walkers"] == 3 and settings["wlmd"]["target_walker"] == "median"
    seed = out / "seed_3"
    for i, init in ((1, 1003), (2, 2003)):
        assert json.loads((seed / f"adamw-start-{i}" / "config.json").read_text())["train"]["seed"] == init
    walk = json.loads((seed / "wlmd" / "walk.json").read_text())
    assert walk[0]["cosine"] == pytest.approx([1.0] * 3)  # each walker at its own start
    last = walk[-1]["cosine"]
    samples = [
        json.loads(line) for line in (seed / "wlmd" / "samples" / "metrics.jsonl").read_text().splitlines()
    ]
    assert samples, "the window holds every state, so production saves samples"
    far = [s for s in samples if last[s["walker"]] <= 0.9999] or samples
    measured = study_b_measure.measured_settings(out)
    for target in [min(last) - 1e-3, *sorted(last)]:  # no walker far enough, then one, two, three
        at = dataclasses.replace(measured, wlmd=dataclasses.replace(measured.wlmd, target_cosine=target))
        expected = [s for s in samples if last[s["walker"]] <= target] or samples
        assert study_b_measure.injected_sample(seed / "wlmd", at).name == f"step_{expected[-1]['step']:06d}"
    injected = json.loads((seed / "inject-wlmd-random" / "config.json").read_text())["injection"]["source"]
    assert injected.endswith(f"step_{far[-1]['step']:06d}")
    code, text, err = _cli(capsys, "study-b", "records", dest)
    assert code == 0, err
    missed = last[far[-1]["walker"]] > 0.9999 or walk[-1]["flatness"] < 0.8  # the injected walker's
    assert text.count("**claim not tested**") == (3 if missed else 0)  # one WLMD run per noise type
    # Each target decides alone: no flatness target, then a cosine target the injected walker missed.
    for wlmd, flagged in (({}, 0), ({"target_cosine": min(last) - 0.01}, 3)):
        edited = {**settings, "target_flatness": None, "wlmd": {**settings["wlmd"], **wlmd}}
        (dest / "settings.json").write_text(json.dumps(edited))
        code, text, err = _cli(capsys, "study-b", "records", dest)
        assert code == 0, err
        assert (
            text.count("**claim not tested** (cosine") == flagged and "flatness" not in text.split("\n\n")[0]
        )


def test_the_old_spellings_note_the_move_and_run(goldilocks, tmp_path, capsys):
    # `interp inject` and `interp wlmd` moved under `interp study-b` (one release of notice).
    code, _, err = _cli(
        capsys, "inject", "--ckpt", goldilocks, "--out", tmp_path / "x", "--k", "3", "--epochs", "1"
    )
    assert code == 0, err
    assert "note: `interp inject` moved to `interp study-b inject`" in err
    code, _, err = _cli(capsys, "wlmd", "--ckpt", tmp_path / "nope", "--out", tmp_path / "w")
    assert code == 2 and "moved to `interp study-b wlmd`" in err
