"""The `interp` command line: start-up cost, exit codes, one-line errors, train, describe, moved spellings."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from interp.cli import main
from interp.store.run_folder import is_done, read_config


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_help_lists_commands_fast_and_without_torch():
    code = (
        "import sys, time; t = time.perf_counter(); from interp.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
        "print(time.perf_counter() - t, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    *_, seconds, torch_imported = result.stdout.split()
    assert torch_imported == "False"
    for command in ("train", "evolve", "study-a"):
        assert command in result.stdout
    assert "demo      now: interp study-a demo" in result.stdout  # moved spellings say where
    # Generous bound for a loaded CI machine; typical is ~0.1 s (see README).
    assert float(seconds) < 0.5


TINY = [
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
    "--eval-every",
    "2",
    "--no-progress",
]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--preset", "mpsp-2l2", "--out", "X"], "did you mean 'mpsp-2l2h'"),
        (["train", "--r", "1.5", "--out", "X"], "r = 1.5"),
        (["train", "--label", "sum-mod4", "--out", "X"], "sum-mod4"),
        (["train", "--xi", "0.1", "--out", "X"], "unknown key 'xi'"),
        (["train", "--epochs", "0", "--out", "X"], "TrainConfig.epochs = 0"),
        (["train", "--seeds", "0-x", "--out", "X"], "--seeds '0-x'"),
        (["train", "--r", "0.5"], "--out is required"),
        (["train", "--device", "cuda:7", "--epochs", "1", "--out", "X"], "cuda:7"),
        (["train", "--resume", "X", "--r", "0.5"], "--r cannot be changed"),
        (["train", "--resume", "does/not/exist"], "does/not/exist"),
        (["train", "--bogus"], "interp train: no such option '--bogus' (did you mean"),
        (["train", "--seed", "x"], "interp train: Invalid value for '--seed'"),
        (["bogus"], "interp: No such command 'bogus'; its commands: ablate, attribute"),
        (["study-a", "nope"], "its commands: decide, demo, describe, evolution"),
        (["study-a", "decide", "no/such/folder"], "no/such/folder is not a folder"),
        (["train", "--vectorize", "--out", "X"], "no --seeds were given"),
        (
            ["train", "--vectorize", "--seeds", "0-1", "--jobs", "2", "--out", "X"],
            "--jobs sets parallel processes",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, *args)
    assert code == 2, (out, err)
    assert message in err
    # One line, click's option-parsing errors included (its own display takes three).
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_error_lines_link_their_docs_section(capsys, tmp_path):
    code, _, err = run_cli(capsys, "train", "--r", "1.5", "--out", str(tmp_path / "x"))
    assert code == 2 and "[see docs/errors.md#configerror]" in err
    code, _, err = run_cli(capsys, "train", "--resume", str(tmp_path / "missing"))
    assert code == 2 and "[see docs/errors.md#" in err


def test_existing_run_with_other_config_exits_2(capsys, tmp_path):
    out = str(tmp_path / "run")
    assert run_cli(capsys, "train", *TINY, "--epochs", "2", "--out", out)[0] == 0
    code, _, err = run_cli(capsys, "train", *TINY, "--epochs", "3", "--out", out)
    assert code == 2 and "train.epochs is 2 there but 3 now" in err


def test_train_writes_a_run_and_prints_a_summary(capsys, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = run_cli(capsys, "train", *TINY, "--epochs", "4", "--seed", "3", "--out", str(out))
    assert code == 0, err
    assert is_done(out)
    config = read_config(out)
    assert config["train"]["seed"] == 3 and config["task"]["vocab"] == 10 and config["model"]["n_layers"] == 1
    for token in ("adv", "val", "train", "generalized (adv/acc >= 1.0)"):
        assert token in stdout


def test_seeds_train_into_one_folder_each(capsys, tmp_path):
    code, stdout, err = run_cli(
        capsys, "train", *TINY, "--epochs", "2", "--seeds", "0,2", "--jobs", "1", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert is_done(tmp_path / "seed_0") and is_done(tmp_path / "seed_2")
    assert read_config(tmp_path / "seed_2")["train"]["seed"] == 2
    assert "engine" not in read_config(tmp_path / "seed_2")["train"]  # separate: written as before
    assert "seed_0" in stdout and "seed_2" in stdout


def test_describe_prints_splits_ratios_parameters_and_hooks(capsys):
    code, out, err = run_cli(capsys, "study-a", "describe")
    assert code == 0, err
    assert "16384" in out and "2048" in out
    assert "0.9000" in out  # the measured spurious ratio of train equals r exactly
    assert "parameters:" in out and "blocks.1.attn.hook_pattern" in out
    assert err == ""


def test_a_moved_command_says_where_it_went_in_one_line_then_runs(capsys):
    code, out, err = run_cli(capsys, "describe", "--r", "0.5", "--preset", "mpsp-1l1h")
    assert code == 0, err
    assert err.strip().splitlines() == [
        "note: `interp describe` moved to `interp study-a describe`; the old spelling goes in the next release"
    ]
    assert out == run_cli(capsys, "study-a", "describe", "--r", "0.5", "--preset", "mpsp-1l1h")[1]
    code, out, err = run_cli(capsys, "demo", "--help")
    assert code == 0 and "Moved to `interp study-a demo`" in out and "--out" in out


def test_vectorized_seeds_train_in_this_process_into_one_folder_each(capsys, tmp_path):
    code, stdout, err = run_cli(
        capsys, "train", *TINY, "--epochs", "2", "--seeds", "0,2", "--vectorize", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert is_done(tmp_path / "seed_0") and is_done(tmp_path / "seed_2")
    assert read_config(tmp_path / "seed_2")["train"]["seed"] == 2
    assert read_config(tmp_path / "seed_2")["train"]["engine"] == "vectorized"
    assert "seed_0" in stdout and "seed_2" in stdout


def test_a_vectorized_group_resumes_only_vectorized(capsys, tmp_path):
    group = [*TINY, "--epochs", "2", "--seeds", "0,2", "--out", str(tmp_path)]
    assert run_cli(capsys, "train", *group, "--vectorize")[0] == 0
    config = (tmp_path / "seed_0" / "config.json").read_bytes()
    for args in (group, ["--resume", str(tmp_path / "seed_0")]):  # the separate engine, two ways
        code, out, err = run_cli(capsys, "train", *args)
        assert code == 2, (out, err)
        assert "seed_0 was trained by the vectorized engine, not the separate one" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "seed_0" / "config.json").read_bytes() == config
    assert run_cli(capsys, "train", *group, "--vectorize")[0] == 0  # the same engine: done already


def test_every_listed_command_loads_from_its_module():
    import click

    from interp.cli import cli
    from interp.cli.group import COMMANDS

    ctx = click.Context(cli, info_name="interp")
    for name, (module, summary) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.callback.__module__ == module, name
        assert summary and len(summary) <= 100, name


def test_no_command_declares_an_option_twice():
    # A merge can leave two declarations of one option; click then only warns at run time.
    from interp.cli import cli
    from interp.cli.group import COMMANDS

    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        seen = [opt for param in command.params for opt in getattr(param, "opts", [])]
        assert len(seen) == len(set(seen)), f"interp {name}: {sorted(o for o in seen if seen.count(o) > 1)}"
